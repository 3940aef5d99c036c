/* comm: collectives between the ranks of a run, behind a struct of function pointers
 * (STYLE.md habit 6), the way Device hides the compute backend. The trainer does not
 * know which backend it drives.
 *
 * Backends:
 *   self  one rank; every collective is a copy or nothing, a tagged send to itself is
 *         queued for its own recv_tag (comm.c)
 *   mpi   MPI_COMM_WORLD (comm/mpi.c), or a group split from it; `mpirun -np N
 *         ./train` on one machine or many
 *   nccl  NCCL on the CUDA device's stream (comm/nccl.h), over the buffers of the device,
 *         bootstrapped over an MPI group, which also carries its host_all_reduce
 *
 * Buffers. The float buffers of the collectives are device addresses of the Device the
 * run uses (tier base + offset; host memory for the CPU device), as NCCL takes them;
 * passing the same pointer as send and recv makes a call in place (NCCL's rule too).
 * Counts are elements and may exceed INT_MAX (the MPI backend splits such calls).
 * Every rank makes the same calls in the same order with the same counts and roots.
 * Order: a call sees all device work queued before it, and device work queued after
 * it sees its result (MPI calls block; NCCL enqueues on the device's stream).
 *
 * Errors. A collective that fails cannot be unwound on one rank without leaving the
 * others waiting in it, so a backend's failure prints "train: <backend> error at
 * file:line: ..." and aborts every rank (MPI_CHECK, later NCCL_CHECK); the functions
 * return nothing. Errors of one rank's own making (a bad flag, an unreadable file)
 * are agreed on first with comm_agree, before any collective that could hang.
 */
#ifndef COLOSSALC_RUNTIME_COMM_H
#define COLOSSALC_RUNTIME_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef enum CommRed { COMM_SUM, COMM_MAX, COMM_MIN } CommRed;

/* The largest tag of isend/recv_tag (MPI guarantees at least 32767). */
#define COMM_TAG_MAX 32767

typedef struct Comm Comm;
struct Comm {
  const char *name;           /* "self", "mpi" */
  int rank, size;             /* this rank in [0, size) */
  int local_rank, local_size; /* the same among the ranks on this machine (threads, GPUs) */
  void *impl;
  /* recv[i] = op over ranks of send[i], on every rank. */
  void (*all_reduce)(Comm *c, const float *send, float *recv, int64_t count, CommRed op);
  /* The same, on root only (recv is not touched elsewhere). */
  void (*reduce)(Comm *c, const float *send, float *recv, int64_t count, CommRed op, int root);
  /* send holds size*count floats; rank r gets recv[i] = op over ranks of
   * send[r*count + i]. In place: recv == send + rank*count. */
  void (*reduce_scatter)(Comm *c, const float *send, float *recv, int64_t count, CommRed op);
  /* recv holds size*count floats: block r is rank r's send[0..count).
   * In place: send == recv + rank*count. */
  void (*all_gather)(Comm *c, const float *send, float *recv, int64_t count);
  /* send and recv hold size*count floats each (apart): send's block r goes to rank r,
   * recv's block r came from rank r's send. */
  void (*all_to_all)(Comm *c, const float *send, float *recv, int64_t count);
  /* root's buf[0..count) to every rank's buf. */
  void (*broadcast)(Comm *c, float *buf, int64_t count, int root);
  /* Point to point, blocking: a send is matched by the peer's recv of equal count. */
  void (*send)(Comm *c, const float *buf, int64_t count, int peer);
  void (*recv)(Comm *c, float *buf, int64_t count, int peer);
  void (*barrier)(Comm *c);
  /* A sub-group: the ranks of c that pass the same color (>= 0), ranked by key (ties:
   * by rank in c), as a new Comm (MPI_Comm_split; the self backend returns a new
   * self Comm). Every rank of c calls it. destroy frees it (before its parent). */
  Comm *(*split)(Comm *c, int color, int key);
  /* Tagged point to point (tag in [0, COMM_TAG_MAX]). isend copies buf[0..count)
   * into a pooled buffer and returns without waiting for the receiver; wait_sends
   * completes every isend made so far (the pool's buffers are reused, so a steady
   * pattern of sends allocates nothing after its first round). recv_tag blocks until
   * the message with that tag from peer is in buf; its count must equal the send's.
   * Messages from one rank to another with the same tag arrive in the order sent. */
  void (*isend)(Comm *c, const float *buf, int64_t count, int peer, int tag);
  void (*recv_tag)(Comm *c, float *buf, int64_t count, int peer, int tag);
  void (*wait_sends)(Comm *c);
  /* Optional (NULL: nothing to prepare). Every rank of c calls it once, before its
   * first isend or recv_tag, with the ranks it will exchange tagged messages with
   * (when a names b, b names a): NCCL sets up one channel per direction. */
  void (*connect)(Comm *c, const int *peers, int npeers);
  /* A few host values (losses, sums of squares, error flags), in place. */
  void (*host_all_reduce)(Comm *c, double *vals, int n, CommRed op);
  /* Point to point, blocking, of host memory (send and recv take device memory on a
   * GPU backend): a state each rank holds its part of, assembled on one. */
  void (*host_send)(Comm *c, const float *buf, int64_t count, int peer);
  void (*host_recv)(Comm *c, float *buf, int64_t count, int peer);
  /* Ends every rank with exit status code (after the caller printed why). */
  void (*abort)(Comm *c, int code) __attribute__((noreturn));
  /* Frees c: a Comm from split frees its group; the one from comm_open finalizes
   * the backend (MPI_Finalize). */
  void (*destroy)(Comm *c);
};

/* The single-rank backend. NULL only when out of memory. */
Comm *comm_self_new(void);
/* MPI_COMM_WORLD (MPI_Init_thread with the funneled level: only the calling thread
 * communicates). NULL with a message on error. */
Comm *comm_mpi_new(int *argc, char ***argv, char *err, size_t errlen);

/* The backend for this process: COLOSSALC_COMM=self|mpi when set; otherwise mpi when
 * a launcher started it (mpirun/mpiexec of Open MPI, MPICH, MVAPICH, or a PMI/PMIx
 * launcher such as srun: OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK or
 * MV2_COMM_WORLD_SIZE in the environment), else self, so a plain `./train` neither
 * initialises MPI nor pays for it. NULL with a message on error. */
Comm *comm_open(int *argc, char ***argv, char *err, size_t errlen);

/* A fatal error of this process outside a collective (a device call that failed, memory
 * that ran out): the message is printed; comm_fatal ends every rank (MPI_Abort, once
 * comm_mpi_new has run: a launcher that does not kill the others, as srun by default,
 * would leave them waiting in their next collective), else exits with code. */
_Noreturn void comm_fatal(int code);
extern void (*comm_fatal_hook)(int code); /* what a backend runs there (comm/mpi.c) */

/* Agreement on an error: every rank passes whether it failed (the only collective a
 * rank may reach in a failed state). Returns 0 when no rank failed; otherwise -1, with
 * err (when not NULL) emptied on every rank but the lowest failing one, whose message
 * is the one to print. */
int comm_agree(Comm *c, int failed, char *err);

#endif
