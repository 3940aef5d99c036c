/* A host emulation of NCCL (libnccl.so.2), for tests only: the entry points
 * runtime/device/cuda_api.c opens, so that `train --device cuda` under mpirun runs its NCCL
 * communication on a machine without GPUs (tests/cuda_emul/tests.cmake).
 *
 * As on a GPU, every operation runs on its stream (the emulated driver's streams are
 * threads, driver.c), after the stream's earlier work and before its later work, and
 * the host goes on at once. And as NCCL's, a send completes only when its receive does
 * (rendezvous: nothing is buffered), a collective only when every rank of the
 * communicator has reached it, and a rank's operations on a communicator pair with the
 * peer's in the order issued. So a schedule that deadlocks on GPUs deadlocks here: an
 * operation that waits COLOSSALC_EMUL_NCCL_TIMEOUT seconds (default 300) without the
 * peer's counterpart says what it waits for and aborts the process. A send that meets
 * a receive of another size (the two ranks issued their operations in other orders) is
 * an error at once. ncclGroupStart/ncclGroupEnd issue the operations between them
 * together: they progress at once on their stream, so two ranks may send to each other
 * inside a group (NCCL's way), not outside it.
 *
 * Data moves between the processes through a file mapped by every rank of a
 * communicator (in $TMPDIR or /tmp, removed once all have mapped it): a pipe per ordered
 * pair of ranks for point-to-point messages and another for the collectives (a
 * collective is messages to and from the communicator's rank 0, which reduces in rank
 * order), each a chunk buffer with counters the two sides move with atomic loads and
 * stores. MPI makes the communicators (ncclCommInitRank, on the host thread, as MPI was
 * initialised for); the stream threads never call it. */
#include <dlfcn.h>
#include <fcntl.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tests/cuda_emul/emul.h"

enum {
  EMUL_TAG = 1 << 20, /* the handshake's tags: EMUL_TAG + 2 * (seq mod 4096) (+1 the answer) */
  CHUNK = 256 << 10,  /* bytes a pipe carries at a time */
  MAX_GROUP = 4096,   /* operations in one ncclGroupStart/End */
};

typedef struct EmulId {
  char magic[8];
  int root; /* world rank */
  int seq;
} EmulId;

/* One direction between two ranks: the receiver posts a receive (posted, count), the
 * sender fills the buffer a chunk at a time (written) and the receiver empties it
 * (read); the sender counts the message done (done) once the last chunk is read. */
typedef struct Pipe {
  uint64_t posted, done, written, read; /* atomics */
  int64_t count;                        /* the posted receive's bytes */
  int64_t len;                          /* the bytes of the chunk in buf */
  char pad[16];
  char buf[CHUNK];
} Pipe;

/* The mapped file: this header, then the pipes. gen grows at every move of any pipe,
 * a futex the waiting sides sleep on. */
typedef struct Header {
  uint32_t gen;
  char pad[4092];
} Header;

struct ncclComm {
  MPI_Comm comm;
  int rank, size;
  Header *hdr;
  Pipe *pipes; /* [2][size][size]: set, from, to */
  size_t map_bytes;
};

static int next_seq;

static Pipe *pipe_of(ncclComm_t c, int set, int from, int to) {
  return &c->pipes[((size_t)set * (size_t)c->size + (size_t)from) * (size_t)c->size + (size_t)to];
}

static uint64_t ld(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

/* A pipe moved: the store, then every sleeper of the communicator woken. */
static void st(ncclComm_t c, uint64_t *p, uint64_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
  __atomic_add_fetch(&c->hdr->gen, 1, __ATOMIC_RELEASE);
  syscall(SYS_futex, &c->hdr->gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int world_rank(void) {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

static ncclResult_t fail(const char *what) {
  fprintf(stderr, "nccl emulation: %s\n", what);
  return ncclInternalError;
}

/* ---- operations: state machines stepped by the stream thread ------------------------ */

typedef enum { OP_SEND, OP_RECV } OpKind;
typedef struct Op {
  OpKind kind;
  ncclComm_t c;
  int set, peer;
  char *buf;
  int64_t bytes, moved;
  int state;        /* send: 0 waits for the receive, 1 moves chunks, 2 done; recv: 0 posts, 1 moves, 2 done */
  uint64_t index;   /* recv: its place on the pipe (posted before it) */
  const char *what; /* the NCCL call, for a deadlock's report */
} Op;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double timeout_s(void) {
  const char *v = getenv("COLOSSALC_EMUL_NCCL_TIMEOUT");
  double t = v ? atof(v) : 300;
  return t > 0 ? t : 300;
}

/* One step of op; returns whether it moved. */
static int op_step(Op *o) {
  ncclComm_t c = o->c;
  if (o->kind == OP_SEND) {
    Pipe *p = pipe_of(c, o->set, c->rank, o->peer);
    if (o->state == 0) { /* rendezvous: the receive of this message is posted */
      if (ld(&p->posted) <= ld(&p->done)) return 0;
      int64_t want = __atomic_load_n(&p->count, __ATOMIC_ACQUIRE);
      if (want != o->bytes) {
        fprintf(stderr,
                "nccl emulation: rank %d of %d: %s of %lld bytes to rank %d met a receive of %lld bytes there (the "
                "two ranks issued their operations in other orders)\n",
                c->rank, c->size, o->what, (long long)o->bytes, o->peer, (long long)want);
        abort();
      }
      o->state = 1;
      return 1;
    }
    if (o->state == 1) {
      if (ld(&p->written) != ld(&p->read)) return 0; /* the last chunk not yet taken */
      if (o->moved == o->bytes) {                    /* all taken: the message is done */
        st(c, &p->done, ld(&p->done) + 1);
        o->state = 2;
        return 1;
      }
      int64_t n = o->bytes - o->moved < CHUNK ? o->bytes - o->moved : CHUNK;
      memcpy(p->buf, o->buf + o->moved, (size_t)n);
      p->len = n;
      o->moved += n;
      st(c, &p->written, ld(&p->written) + 1);
      return 1;
    }
    return 0;
  }
  Pipe *p = pipe_of(c, o->set, o->peer, c->rank);
  if (o->state == 0) { /* the last message on this pipe is done: post this one */
    if (ld(&p->posted) != ld(&p->done)) return 0;
    o->index = ld(&p->posted);
    __atomic_store_n(&p->count, o->bytes, __ATOMIC_RELEASE);
    st(c, &p->posted, o->index + 1);
    o->state = 1;
    return 1;
  }
  if (o->state == 1) {
    if (ld(&p->written) > ld(&p->read)) {
      int64_t n = p->len;
      memcpy(o->buf + o->moved, p->buf, (size_t)n);
      o->moved += n;
      st(c, &p->read, ld(&p->read) + 1);
      return 1;
    }
    if (ld(&p->done) > o->index) {
      o->state = 2;
      return 1;
    }
  }
  return 0;
}

/* Is an earlier op of the list on op i's pipe not done? (A group's messages to one peer
 * go in the order issued.) */
static int waits_behind(const Op *ops, int i) {
  for (int j = 0; j < i; j++)
    if (ops[j].state != 2 && ops[j].kind == ops[i].kind && ops[j].c == ops[i].c && ops[j].set == ops[i].set &&
        ops[j].peer == ops[i].peer)
      return 1;
  return 0;
}

/* Steps every op until all are done; polls with a growing pause while none moves, and
 * reports a deadlock after the timeout. */
static void run_ops(Op *ops, int n) {
  double last = now_s(), limit = timeout_s();
  uint32_t *gen = &ops[0].c->hdr->gen;
  for (;;) {
    uint32_t g = __atomic_load_n(gen, __ATOMIC_ACQUIRE);
    int moved = 0, left = 0;
    for (int i = 0; i < n; i++) {
      if (ops[i].state == 2) continue;
      left++;
      if (waits_behind(ops, i)) continue;
      while (op_step(&ops[i])) moved = 1;
      left -= ops[i].state == 2;
    }
    if (!left) return;
    if (moved) {
      last = now_s();
      continue;
    }
    if (now_s() - last > limit) {
      for (int i = 0; i < n; i++) {
        const Op *o = &ops[i];
        if (o->state == 2) continue;
        fprintf(stderr,
                "nccl emulation: rank %d of %d: %s (%lld bytes %s rank %d) has waited %.0f s for rank %d's %s: a "
                "deadlock (NCCL's sends complete only when the peer receives, its collectives when every rank "
                "reaches them)\n",
                o->c->rank, o->c->size, o->what, (long long)o->bytes, o->kind == OP_SEND ? "to" : "from", o->peer,
                limit, o->peer, o->kind == OP_SEND ? "receive" : "send");
      }
      abort();
    }
    /* until a pipe of ops[0]'s communicator moves (a group's ops on others: 10 ms at most) */
    struct timespec wait = {0, 10 * 1000 * 1000};
    syscall(SYS_futex, gen, FUTEX_WAIT, g, &wait, NULL, 0);
  }
}

static Op op_new(OpKind kind, ncclComm_t c, int set, int peer, void *buf, int64_t bytes, const char *what) {
  return (Op){kind, c, set, peer, buf, bytes, 0, 0, 0, what};
}

/* ---- collectives: messages to and from rank 0 (the collectives' pipes) -------------- */

static size_t type_size(ncclDataType_t t) { return t == ncclFloat64 ? 8 : 4; }

static int supported(ncclDataType_t t, ncclRedOp_t op) {
  return (t == ncclFloat32 || t == ncclFloat64 || t == ncclInt32) &&
         ((int)op < 0 || op == ncclSum || op == ncclMax || op == ncclMin);
}

/* acc[i] op= x[i] */
static void reduce_into(void *acc, const void *x, size_t count, ncclDataType_t t, ncclRedOp_t op) {
#define RED(T)                                                                                 \
  for (size_t i = 0; i < count; i++) {                                                         \
    T a = ((T *)acc)[i], b = ((const T *)x)[i];                                                \
    ((T *)acc)[i] = op == ncclSum ? a + b : op == ncclMax ? (a > b ? a : b) : (a < b ? a : b); \
  }
  if (t == ncclFloat32) RED(float)
  else if (t == ncclFloat64) RED(double)
  else RED(int32_t)
#undef RED
}

typedef enum { C_ALLREDUCE, C_REDUCE, C_REDUCESCATTER, C_ALLGATHER, C_BROADCAST } CollKind;
typedef struct Coll {
  CollKind kind;
  ncclComm_t c;
  const char *send;
  char *recv;
  size_t count; /* elements: per rank for reduce-scatter and all-gather */
  ncclDataType_t t;
  ncclRedOp_t op;
  int root;
  const char *what;
} Coll;

static void one(ncclComm_t c, OpKind k, int peer, void *buf, int64_t bytes, const char *what) {
  Op o = op_new(k, c, 1, peer, buf, bytes, what);
  run_ops(&o, 1);
}

/* The collective on the calling stream's thread. Rank 0 takes every rank's input in rank
 * order, reduces (rank order: the same sums on every run) or concatenates, and hands out
 * the result; a broadcast or a reduce to another root goes through rank 0 too. */
static void coll_run(void *arg) {
  const Coll *x = arg;
  ncclComm_t c = x->c;
  size_t es = type_size(x->t), n = (size_t)c->size;
  size_t in_bytes = (x->kind == C_REDUCESCATTER ? x->count * n : x->count) * es;
  size_t out_bytes = (x->kind == C_ALLGATHER ? x->count * n : x->count) * es;
  char *all = NULL; /* rank 0: the result */
  if (x->kind == C_BROADCAST) {
    char *b = malloc(out_bytes ? out_bytes : 1);
    if (!b) abort();
    if (c->rank == x->root) memmove(b, x->send, out_bytes);
    if (x->root != 0) {
      if (c->rank == x->root) one(c, OP_SEND, 0, b, (int64_t)out_bytes, x->what);
      if (c->rank == 0) one(c, OP_RECV, x->root, b, (int64_t)out_bytes, x->what);
    }
    if (c->rank == 0) {
      for (int r = 1; r < c->size; r++) one(c, OP_SEND, r, b, (int64_t)out_bytes, x->what);
    } else {
      one(c, OP_RECV, 0, b, (int64_t)out_bytes, x->what);
    }
    memmove(x->recv, b, out_bytes);
    free(b);
    return;
  }
  size_t gathered = x->kind == C_ALLGATHER ? out_bytes : in_bytes;
  if (c->rank == 0) {
    all = malloc(gathered ? gathered : 1);
    char *in = malloc(in_bytes ? in_bytes : 1);
    if (!all || !in) abort();
    if (x->kind == C_ALLGATHER) {
      memcpy(all, x->send, in_bytes);
      for (int r = 1; r < c->size; r++) one(c, OP_RECV, r, all + (size_t)r * in_bytes, (int64_t)in_bytes, x->what);
    } else {
      memcpy(all, x->send, in_bytes);
      for (int r = 1; r < c->size; r++) {
        one(c, OP_RECV, r, in, (int64_t)in_bytes, x->what);
        reduce_into(all, in, in_bytes / es, x->t, x->op);
      }
    }
    free(in);
  } else {
    one(c, OP_SEND, 0, (void *)x->send, (int64_t)in_bytes, x->what);
  }
  switch (x->kind) {
  case C_ALLREDUCE:
  case C_ALLGATHER:
    if (c->rank == 0) {
      for (int r = 1; r < c->size; r++) one(c, OP_SEND, r, all, (int64_t)out_bytes, x->what);
      memmove(x->recv, all, out_bytes);
    } else {
      one(c, OP_RECV, 0, x->recv, (int64_t)out_bytes, x->what);
    }
    break;
  case C_REDUCESCATTER:
    if (c->rank == 0) {
      for (int r = 1; r < c->size; r++) one(c, OP_SEND, r, all + (size_t)r * out_bytes, (int64_t)out_bytes, x->what);
      memmove(x->recv, all, out_bytes);
    } else {
      one(c, OP_RECV, 0, x->recv, (int64_t)out_bytes, x->what);
    }
    break;
  case C_REDUCE:
    if (x->root != 0 && c->rank == 0) one(c, OP_SEND, x->root, all, (int64_t)out_bytes, x->what);
    if (x->root != 0 && c->rank == x->root) one(c, OP_RECV, 0, x->recv, (int64_t)out_bytes, x->what);
    if (x->root == 0 && c->rank == 0) memmove(x->recv, all, out_bytes);
    break;
  case C_BROADCAST: break;
  }
  free(all);
}

/* ---- groups and the stream ------------------------------------------------------------ */

static __thread int group_depth;
static __thread Op *group_ops;
static __thread int group_n;
static __thread cudaStream_t group_stream;

typedef struct OpsTask {
  int n;
  Op ops[];
} OpsTask;

static void ops_run(void *arg) {
  OpsTask *t = arg;
  run_ops(t->ops, t->n);
}

static EmulEnqueueFn *enqueue_fn(void) {
  static EmulEnqueueFn *fn;
  if (!fn) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    *(void **)&fn = lib ? dlsym(lib, "colossalc_emul_enqueue") : NULL;
  }
  return fn;
}

/* fn(arg) on stream s after its earlier work (arg malloc'd, freed after fn); without the
 * emulated driver's streams (or stream 0), now on this thread. */
static ncclResult_t on_stream(cudaStream_t s, void (*fn)(void *), void *arg) {
  EmulEnqueueFn *enq = enqueue_fn();
  if (enq && s) return enq(s, fn, arg) == 0 ? ncclSuccess : fail("could not queue on the stream");
  fn(arg);
  free(arg);
  return ncclSuccess;
}

static ncclResult_t p2p(OpKind k, void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s,
                        const char *what) {
  if (!supported(t, (ncclRedOp_t)-1) || peer < 0 || peer >= c->size || peer == c->rank)
    return fail("a type or peer this emulation does not take");
  Op o = op_new(k, c, 0, peer, buf, (int64_t)(count * type_size(t)), what);
  if (group_depth) {
    if (group_n == MAX_GROUP) return fail("too many operations in a group");
    if (group_n && group_stream != s) return fail("a group's operations on two streams (not emulated)");
    group_stream = s;
    group_ops[group_n++] = o;
    return ncclSuccess;
  }
  OpsTask *task = malloc(sizeof *task + sizeof(Op));
  if (!task) return ncclSystemError;
  task->n = 1, task->ops[0] = o;
  return on_stream(s, ops_run, task);
}

ncclResult_t ncclGroupStart(void); /* nccl.h declares both without a prototype */
ncclResult_t ncclGroupEnd(void);

ncclResult_t ncclGroupStart(void) {
  if (!group_depth++) {
    if (!group_ops && !(group_ops = malloc(MAX_GROUP * sizeof *group_ops))) return ncclSystemError;
    group_n = 0;
  }
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (group_depth <= 0) return fail("ncclGroupEnd without ncclGroupStart");
  if (--group_depth || !group_n) return ncclSuccess;
  OpsTask *task = malloc(sizeof *task + (size_t)group_n * sizeof(Op));
  if (!task) return ncclSystemError;
  task->n = group_n;
  memcpy(task->ops, group_ops, (size_t)group_n * sizeof(Op));
  group_n = 0;
  return on_stream(group_stream, ops_run, task);
}

static ncclResult_t coll(Coll x, cudaStream_t s) {
  if (!supported(x.t, x.op)) return fail("a type or operation this emulation does not take");
  if (group_depth) return fail("a collective inside a group (not emulated)");
  Coll *task = malloc(sizeof *task);
  if (!task) return ncclSystemError;
  *task = x;
  return on_stream(s, coll_run, task);
}

/* ---- the API ------------------------------------------------------------------------------ */

ncclResult_t ncclGetVersion(int *version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated NCCL error"; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  EmulId e = {"ccemul", world_rank(), next_seq++};
  memset(id, 0, sizeof *id);
  memcpy(id, &e, sizeof e);
  return ncclSuccess;
}

/* The members' world ranks by NCCL rank, through the root; then the MPI communicator of
 * the members and the mapped pipes: the root makes the file, each member maps it, the
 * root removes it once all have. */
ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
  EmulId e;
  memcpy(&e, &id, sizeof e);
  if (memcmp(e.magic, "ccemul", 7) || rank < 0 || rank >= nranks)
    return fail("ncclCommInitRank: not an id of this emulation, or a rank out of range");
  int tag = EMUL_TAG + 2 * (e.seq % 4096), me[2] = {rank, world_rank()};
  int *worlds = calloc((size_t)nranks, sizeof *worlds);
  ncclComm_t c = calloc(1, sizeof *c);
  if (!worlds || !c) return ncclSystemError;
  const char *tmp = getenv("TMPDIR");
  char path[512];
  snprintf(path, sizeof path, "%s/ccemul-nccl-%d-%d-%d", tmp && *tmp ? tmp : "/tmp", e.root, e.seq, (int)getpid());
  c->map_bytes = sizeof(Header) + 2 * (size_t)nranks * (size_t)nranks * sizeof(Pipe);
  if (rank == 0) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)c->map_bytes) != 0) return fail("cannot make the communicator's file");
    close(fd);
    worlds[0] = me[1];
    for (int i = 1; i < nranks; i++) {
      int got[2];
      MPI_Recv(got, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (got[0] <= 0 || got[0] >= nranks) return fail("ncclCommInitRank: a rank out of range joined");
      worlds[got[0]] = got[1];
    }
    for (int i = 1; i < nranks; i++) MPI_Send(worlds, nranks, MPI_INT, worlds[i], tag + 1, MPI_COMM_WORLD);
  } else {
    MPI_Send(me, 2, MPI_INT, e.root, tag, MPI_COMM_WORLD);
    MPI_Recv(worlds, nranks, MPI_INT, e.root, tag + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Group all, group;
  MPI_Comm_group(MPI_COMM_WORLD, &all);
  MPI_Group_incl(all, nranks, worlds, &group);
  int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &c->comm);
  MPI_Group_free(&group);
  MPI_Group_free(&all);
  if (rc != MPI_SUCCESS) return fail("MPI_Comm_create_group failed");
  /* the root's path: its pid, broadcast */
  int pid = (int)getpid();
  MPI_Bcast(&pid, 1, MPI_INT, 0, c->comm);
  snprintf(path, sizeof path, "%s/ccemul-nccl-%d-%d-%d", tmp && *tmp ? tmp : "/tmp", e.root, e.seq, pid);
  int fd = open(path, O_RDWR);
  void *m = fd < 0 ? MAP_FAILED : mmap(NULL, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (fd >= 0) close(fd);
  int ok = m != MAP_FAILED, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, c->comm);
  if (rank == 0) unlink(path);
  free(worlds);
  if (!all_ok) return fail("cannot map the communicator's file");
  c->hdr = m;
  c->pipes = (Pipe *)((char *)m + sizeof(Header));
  c->rank = rank, c->size = nranks;
  *out = c;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  munmap(c->hdr, c->map_bytes);
  MPI_Comm_free(&c->comm);
  free(c);
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s) {
  return coll((Coll){C_ALLREDUCE, c, send, recv, count, t, op, 0, "ncclAllReduce"}, s);
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t c, cudaStream_t s) {
  if (root < 0 || root >= c->size) return fail("ncclReduce: a root out of range");
  return coll((Coll){C_REDUCE, c, send, recv, count, t, op, root, "ncclReduce"}, s);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t s) {
  return coll((Coll){C_REDUCESCATTER, c, send, recv, count, t, op, 0, "ncclReduceScatter"}, s);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
  return coll((Coll){C_ALLGATHER, c, send, recv, count, t, (ncclRedOp_t)-1, 0, "ncclAllGather"}, s);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s) {
  if (root < 0 || root >= c->size) return fail("ncclBroadcast: a root out of range");
  return coll((Coll){C_BROADCAST, c, send, recv, count, t, (ncclRedOp_t)-1, root, "ncclBroadcast"}, s);
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return p2p(OP_SEND, (void *)buf, count, t, peer, c, s, "ncclSend");
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return p2p(OP_RECV, buf, count, t, peer, c, s, "ncclRecv");
}
