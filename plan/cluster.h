/* The cluster a plan is made for: how many devices, how they are grouped into
 * nodes, and the figures of one device and of the links between devices, which is
 * everything the cost model (plan/cost.c) reads about the machine.
 *
 * Built-in profiles hold published figures (docs/plan.md names the datasheet of
 * each); `--cluster FILE.json` describes any other cluster in the same terms. All
 * figures are stored in SI base units: FLOP/s, bytes, bytes/s, seconds. */
#ifndef COLOSSALC_PLAN_CLUSTER_H
#define COLOSSALC_PLAN_CLUSTER_H
#include <stdbool.h>
#include <stdio.h>

/* The collectives the cost model prices (plan/cost.h), by their names in plans and
 * cluster files: those programs issue (program/isa.h's comm kinds; send/recv between
 * pipeline stages) and all-to-all. */
#define COLL_KINDS(X)                 \
  X(ALL_REDUCE, "all-reduce")         \
  X(ALL_GATHER, "all-gather")         \
  X(REDUCE_SCATTER, "reduce-scatter") \
  X(ALL_TO_ALL, "all-to-all")         \
  X(SEND_RECV, "send/recv")           \
  X(REDUCE, "reduce")                 \
  X(BROADCAST, "broadcast")

typedef enum {
#define X(kind, name) COLL_##kind,
  COLL_KINDS(X)
#undef X
      COLL_COUNT
} CollKind;

/* One collective as measured among `ranks` ranks of one node (colossalc --calibrate): its
 * seconds at n sizes, bytes as cost_collective counts them (plan/cost.h), increasing.
 * n == 0: not measured. */
enum { COLL_POINTS = 16 };
typedef struct CollCurve {
  int n;
  double bytes[COLL_POINTS], secs[COLL_POINTS];
} CollCurve;

/* A link class: NVLink/NVSwitch or PCIe inside a node, the network between nodes. */
typedef struct LinkSpec {
  char name[64];
  double bandwidth;  /* bytes/s, one direction: per device inside a node, per node between nodes */
  double latency;    /* s, effective per step of a ring collective or per message */
  double efficiency; /* fraction of `bandwidth` a collective library sustains */
} LinkSpec;

typedef struct DeviceSpec {
  char name[64];          /* profile name, e.g. a100-80g */
  char part[96];          /* the product, e.g. "NVIDIA A100 SXM4 80GB" */
  double peak_bf16;       /* FLOP/s, dense tensor-core bf16 */
  double peak_fp16;       /* FLOP/s, dense tensor-core fp16 */
  double peak_fp32;       /* FLOP/s, fp32 (no TF32) */
  double memory;          /* bytes of device memory */
  double memory_bw;       /* bytes/s */
  double reserved;        /* bytes kept back: runtime context, library workspaces, fragmentation */
  double gemm_eff;        /* fraction of peak a large GEMM sustains */
  double attn_eff;        /* fraction of peak a fused attention kernel sustains */
  double mem_eff;         /* fraction of memory_bw a memory-bound kernel sustains */
  double kernel_overhead; /* s per kernel launch */
  bool fp32_only;         /* no low-precision tensor units: plans train in fp32 */
  double peak_fp8;        /* FLOP/s, dense tensor-core fp8 (e4m3); 0: none (before Hopper and Ada) */
  double gemm_half_dim;   /* h of the GEMM's shape curve x / (x + h) (plan/cost.c); 0: 128 */
  bool shares_host;       /* the figures are a whole machine's, which the ranks on it share
                             (a calibrated CPU, colossalc --calibrate): each rank gets its share */
  double commit_bw;       /* bytes/s of memory put behind reserved address space, first written and
                             taken back (ZeRO-3's gathers, ZeRO-2's gradients, the offload's moves);
                             0: free (the profiles: not measured) */
} DeviceSpec;

typedef struct Cluster {
  char name[64];
  int gpus, gpus_per_node;
  DeviceSpec dev;
  LinkSpec intra, inter;
  double host_memory;         /* bytes per node */
  double host_link_bw;        /* bytes/s per device, one direction (PCIe) */
  double nvme_bw;             /* bytes/s of a node's NVMe drives (offload), one direction */
  double nvme;                /* bytes of a node's NVMe drives the training state may use */
  double host_mem_bw;         /* bytes/s of a node's host memory (the CPU optimizer of an offloaded plan) */
  int coll_ranks;             /* the ranks coll was measured among; 0: none measured */
  CollCurve coll[COLL_COUNT]; /* intra_node.collectives: each kind inside a node by size, where a
                                 library's algorithms differ by kind and size more than the ring
                                 model's factors (the cost model scales them to other group sizes) */
  char cpu[64];               /* the nodes' CPU as the C compiler's -march names it ("" unknown): train's
                                 CPU kernels are built for it and for the portable baseline */
} Cluster;

/* Names of the built-in profiles, NULL-terminated. */
extern const char *const cluster_profile_names[];

/* Fill c from a built-in profile with gpus devices, gpus_per_node per node
 * (0: the profile's usual node size, capped at gpus). User errors (an unknown
 * profile, bad counts) go through error_plain. */
void cluster_from_profile(Cluster *c, const char *profile, int gpus, int gpus_per_node);

/* Read a cluster description (docs/plan.md, "--cluster FILE.json"); gpus and
 * gpus_per_node, when positive, override the file's. User errors name the file
 * and the field. */
void cluster_load_json(Cluster *c, const char *path, int gpus, int gpus_per_node);

/* Check the figures; error_plain naming `what` and the first bad field. */
void cluster_validate(const Cluster *c, const char *what);

/* Peak FLOP/s of the precision plans train in (bf16 unless fp32_only). */
double cluster_peak(const Cluster *c);

int cluster_nodes(const Cluster *c);

#endif
