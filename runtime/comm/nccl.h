/* comm/nccl: the NCCL backend of Comm (comm.h), for ranks that run the CUDA device.
 *
 * A NCCL Comm wraps a host Comm (an MPI group, or the world) of the same ranks: the
 * host one bootstraps it (rank 0's ncclUniqueId broadcast over it) and carries what is
 * about host memory (host_all_reduce, barrier, abort, the groups of split); every
 * collective on buffers goes to NCCL, enqueued on the CUDA device's stream, so it is
 * ordered with the kernels like any other device work and the host does not wait for
 * it. Buffers are device addresses.
 *
 * Tagged point to point (the pipeline's isend and recv_tag): connect sets up, for each
 * peer, two NCCL communicators of two ranks (one per direction, made in a fixed order
 * of the pairs so that no two ranks wait on each other) and a send stream. isend copies
 * the data into a pooled device buffer on the compute stream and sends it on the
 * peer's send stream once the copy is done; recv_tag receives on the compute stream. So
 * a send never holds up this rank's compute, as with MPI's buffered sends, and
 * wait_sends makes the compute stream wait for every send so far. NCCL has no tags:
 * messages in one direction between two ranks are received in the order they were
 * sent, whatever their tags, which the compiled pipeline schedule keeps (the
 * compiler's program verifier checks it).
 *
 * Errors: a failed NCCL or CUDA call prints "train: NCCL error at file:line: call:
 * message" and aborts every rank (through the host Comm), as a failed MPI call does. */
#ifndef COLOSSALC_RUNTIME_COMM_NCCL_H
#define COLOSSALC_RUNTIME_COMM_NCCL_H

#include "runtime/comm/comm.h"
#include "runtime/device/cuda_api.h"

/* NCCL over the ranks of host, on stream, with api's NCCL and driver functions (both
 * outlive the Comm). Every rank of host calls it. own_host: destroy frees host too. A
 * failure aborts every rank (bootstrapping cannot be undone on one rank alone). */
Comm *comm_nccl_new(Comm *host, int own_host, const CudaApi *api, CUstream stream);

/* A new NCCL Comm over the ranks of nccl (a Comm made by comm_nccl_new), split from
 * its host Comm, whose collectives run on stream. Every rank of nccl calls it. */
Comm *comm_nccl_dup_on(Comm *nccl, CUstream stream);

#endif
