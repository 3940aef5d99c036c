/* Schedules that deadlock or mismatch on GPUs, seeded in a two-rank program on the
 * emulated driver and NCCL (tests/cuda_emul/nccl.c), and their correct forms
 * (run_seeded_nccl.sh checks each ends as NCCL's would have it). Modes (argv[1]):
 *   exchange_group  both ranks send to each other and receive, inside ncclGroupStart/End
 *                   on one stream: completes, each gets the other's values
 *   exchange        the same without the group: each stream's send waits for a receive
 *                   the peer's stream reaches only after its own send (a deadlock)
 *   two_streams     the send on a stream of its own, the receive on another: completes
 *   mismatch        rank 0 sends 4 floats, rank 1 receives 8 (an error at once)
 *   missing         rank 1 leaves out the second of two all-reduces (a deadlock)
 *   collectives     all-reduce (sum, max), reduce-scatter, all-gather, broadcast from
 *                   rank 1: the values NCCL gives */
#include <cuda.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ncclResult_t ncclGroupStart(void); /* nccl.h declares both without a prototype */
ncclResult_t ncclGroupEnd(void);

#define CK(call)                                          \
  do {                                                    \
    if ((call) != 0) {                                    \
      fprintf(stderr, "seeded_nccl: %s failed\n", #call); \
      exit(1);                                            \
    }                                                     \
  } while (0)

static int rank;

static float *dev(size_t n) {
  CUdeviceptr p;
  CK(cuMemAlloc(&p, n * sizeof(float)));
  return (float *)(uintptr_t)p;
}

static int expect(const float *got, const float *want, int n, const char *what) {
  for (int i = 0; i < n; i++)
    if (got[i] != want[i]) {
      fprintf(stderr, "rank %d: %s[%d] = %g, want %g\n", rank, what, i, got[i], want[i]);
      return 1;
    }
  return 0;
}

int main(int argc, char **argv) {
  int provided, size;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char *mode = argc > 1 ? argv[1] : "";
  if (size != 2) {
    fprintf(stderr, "seeded_nccl: run on two ranks\n");
    return 2;
  }
  CUdevice d;
  CUcontext ctx;
  CK(cuInit(0));
  CK(cuDeviceGet(&d, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, d));
  CK(cuCtxSetCurrent(ctx));
  CUstream s, s2;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  ncclUniqueId id;
  if (rank == 0) CK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t c;
  CK(ncclCommInitRank(&c, 2, id, rank));
  enum { N = 300000 }; /* more than a pipe's chunk */
  float *a = dev(N), *b = dev(N), want[8];
  int peer = 1 - rank, bad = 0;
  for (int i = 0; i < N; i++) a[i] = (float)(rank * 1000 + i % 977), b[i] = -1;
  if (!strcmp(mode, "exchange_group") || !strcmp(mode, "exchange") || !strcmp(mode, "two_streams")) {
    int group = !strcmp(mode, "exchange_group");
    if (group) CK(ncclGroupStart());
    CK(ncclSend(a, N, ncclFloat32, peer, c, strcmp(mode, "two_streams") ? s : s2));
    CK(ncclRecv(b, N, ncclFloat32, peer, c, s));
    if (group) CK(ncclGroupEnd());
    CK(cuStreamSynchronize(s));
    CK(cuStreamSynchronize(s2));
    for (int i = 0; i < N && !bad; i++) bad = b[i] != (float)(peer * 1000 + i % 977);
    if (!bad) printf("rank %d: received rank %d's %d values\n", rank, peer, N);
  } else if (!strcmp(mode, "mismatch")) {
    if (rank == 0) CK(ncclSend(a, 4, ncclFloat32, 1, c, s));
    else CK(ncclRecv(b, 8, ncclFloat32, 0, c, s));
    CK(cuStreamSynchronize(s));
  } else if (!strcmp(mode, "missing")) {
    CK(ncclAllReduce(a, b, 16, ncclFloat32, ncclSum, c, s));
    if (rank == 0) CK(ncclAllReduce(a, b, 16, ncclFloat32, ncclSum, c, s));
    CK(cuStreamSynchronize(s));
  } else if (!strcmp(mode, "collectives")) {
    float *x = dev(8), *y = dev(8);
    for (int i = 0; i < 8; i++) x[i] = (float)(rank ? 10 * i : i + 1);
    CK(ncclAllReduce(x, y, 8, ncclFloat32, ncclSum, c, s));
    CK(cuStreamSynchronize(s));
    for (int i = 0; i < 8; i++) want[i] = (float)(i + 1 + 10 * i);
    bad |= expect(y, want, 8, "all-reduce sum");
    CK(ncclAllReduce(x, y, 8, ncclFloat32, ncclMax, c, s));
    CK(cuStreamSynchronize(s));
    for (int i = 0; i < 8; i++) want[i] = (float)(i == 0 ? 1 : 10 * i);
    bad |= expect(y, want, 8, "all-reduce max");
    CK(ncclReduceScatter(x, y, 4, ncclFloat32, ncclSum, c, s));
    CK(cuStreamSynchronize(s));
    for (int i = 0; i < 4; i++) want[i] = (float)(4 * rank + i + 1 + 10 * (4 * rank + i));
    bad |= expect(y, want, 4, "reduce-scatter");
    CK(ncclAllGather(x, y, 4, ncclFloat32, c, s));
    CK(cuStreamSynchronize(s));
    for (int i = 0; i < 8; i++) want[i] = (float)(i < 4 ? i + 1 : 10 * (i - 4));
    bad |= expect(y, want, 8, "all-gather");
    CK(ncclBroadcast(x, y, 8, ncclFloat32, 1, c, s));
    CK(cuStreamSynchronize(s));
    for (int i = 0; i < 8; i++) want[i] = (float)(10 * i);
    bad |= expect(y, want, 8, "broadcast");
    if (!bad) printf("rank %d: every collective's values as NCCL's\n", rank);
  } else {
    fprintf(stderr, "seeded_nccl: unknown mode %s\n", mode);
    bad = 2;
  }
  CK(ncclCommDestroy(c));
  MPI_Finalize();
  return bad;
}
