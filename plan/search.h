/* The plan search: data × tensor × pipeline degrees, micro-batch size and count,
 * ZeRO stage, recompute, pipeline schedule and, through plan/shard.c, the sharding
 * of every op; each candidate priced by plan/cost.c. Returns the fastest plan that
 * fits in memory and the runners-up with why they lost. Deterministic (a fixed
 * enumeration order, ties kept by the first) and bounded (the enumeration is
 * polynomial in the divisors of the GPU count and the batch). */
#ifndef COLOSSALC_PLAN_SEARCH_H
#define COLOSSALC_PLAN_SEARCH_H
#include "ir/analysis.h"
#include "plan/schedule.h"
#include "plan/shard.h"

extern const char *const schedule_names[PS_KINDS + 1];

/* Where the training state lives between uses: all on the devices; the optimizer's
 * state on the host (ZeRO-Offload); or every rank's ZeRO-3 shard of the parameters,
 * gradients and optimizer state at home on its node's host memory and, beyond it, NVMe
 * (ZeRO-Infinity, Gemini), each layer's parameters brought up before use. */
typedef enum { OFFLOAD_NONE, OFFLOAD_OPTIMIZER, OFFLOAD_STATE, OFFLOAD_KINDS } OffloadKind;
extern const char *const offload_names[OFFLOAD_KINDS + 1];

/* The parts of a plan the user fixed (--dp ... or --plan FILE); -1 or NULL
 * leaves a part to the search. */
typedef struct PlanForce {
  int dp, tp, pp, zero, mbs, v, schedule, rc;
  int offload;              /* -1 search, else an OffloadKind */
  int attn;                 /* AttnKernel; fused unless a plan file says otherwise */
  bool classifier_fused;    /* --classifier fused: the logits never stored whole */
  const char **op_strategy; /* [g->n] strategy name per op, or NULL */
  bool exec;                /* the plan will be compiled: only what code generation runs */
  bool lowp;                /* priced (and compiled) in 16-bit mixed precision (--precision) */
  bool fp8;                 /* ... with the linear layers' GEMMs in fp8 (--precision fp8) */
  bool fp8_classifier;      /* ... and the classifier's (--fp8-classifier) */
  int precision;            /* the DType compiled (DT_E4M3: fp8), -1 unset; a plan file's "precision" */
} PlanForce;

void plan_force_init(PlanForce *f);

typedef struct PlanChoice {
  int dp, tp, pp;
  int mbs, m; /* micro-batch size (sequences) and micro-batches per step */
  int zero;   /* ZeRO stage 0-3 over the data-parallel ranks */
  int v;      /* model chunks per pipeline stage (1 for 1F1B) */
  PipeSchedule sched;
  Recompute rc;
  AttnKernel attn;
  int cand;            /* which sharding candidate of (tp, mbs, rc) */
  OffloadKind offload; /* OPTIMIZER: its state (and fp32 master weights) on the host, AdamW on
                        * the CPU, as ZeRO-Offload: gradients go down and weights come up each
                        * step; STATE (ZeRO-3): the whole shard at home on the host and NVMe */
} PlanChoice;

/* Step time and its parts (seconds), on the critical pipeline stage. */
typedef struct PlanPrice {
  double step, compute, recompute, tp_comm, p2p, bubble, dp_comm, optimizer;
  double tflops, hw_tflops, mfu; /* per GPU: model FLOPs, with recompute, model FLOPs over peak */
  double peak;                   /* bytes per device, on the fullest stage */
  double host;                   /* bytes of host memory per node the offloaded state needs */
  double nvme;                   /* bytes of NVMe per node it needs beyond the host (STATE) */
  double link_bytes;             /* STATE: bytes one device moves over its host link a step */
  double link_time, offload;     /* STATE: their time, and what compute does not hide of it */
  double nvme_time;              /* STATE: reading and writing the NVMe part, in the optimizer step */
  int peak_stage, critical_stage;
  bool fits;
} PlanPrice;

typedef struct StageCost {
  int first_layer, nlayers;                                      /* its layers (all chunks); -1/0 when none */
  double t_fwd, t_bwd, tp_comm, t_rc, p2p, time;                 /* per micro-batch */
  double t_w;                                                    /* of t_bwd, ZB-H1's W (SegCost.t_w) */
  double weights, grads, optimizer, activations, buffers, total; /* bytes per device */
  double host;           /* bytes per device kept on the host (an offloaded optimizer) */
  double params;         /* parameter elements per device */
  double params_dptp;    /* of them, those replicated over the tensor-parallel ranks whose
                          * gradients are partial sums there (reduced over dp x tp) */
  double params_dptp_mb; /* ... and that have other uses too: a compiled program sums
                          * their gradients over tp in each micro-batch's backward */
} StageCost;

typedef struct Plan {
  PlanChoice ch;
  PlanPrice pr;
  const ShardCand *sc;
  int nchunks;
  int *chunk_lo, *chunk_hi; /* [nchunks] layer-segment ranges [lo, hi) of each chunk */
  StageCost *stage;         /* [pp] */
} Plan;

typedef struct RunnerUp {
  Plan plan;
  char why[200];
} RunnerUp;

typedef struct PlanResult {
  const Graph *g;
  const Cluster *cl;
  PlanModel *pm;
  GraphStats stats;
  bool exec;                        /* priced as compiled (PlanForce.exec) */
  bool mixed;                       /* bf16 compute with fp32 master weights, else fp32 (what
                                     * is compiled: plans for code generation are fp32) */
  double peak;                      /* FLOP/s per device in that precision (MFU's base) */
  bool fp8;                         /* the linear layers' GEMMs in fp8, at the device's fp8 peak */
  int precision;                    /* the DType priced: DT_F32, or the compiled (or --what-if: bf16) mixed one */
  double w_bytes, g_bytes, o_bytes; /* model-state bytes per parameter */
  double usable;                    /* device memory less the reserve */
  Plan best;
  RunnerUp *ru;
  int nru;
  long evaluated, feasible;
  double search_s; /* wall time (printed, never in the JSON) */
} PlanResult;

/* Search (or price a forced plan). Everything lives in arena `a`. A plan that
 * cannot exist, or none that fits, is a user error (error_plain) saying what does
 * not fit and by how much. */
PlanResult *plan_search(Arena *a, const Graph *g, const Cluster *cl, const PlanForce *f);

/* One collective of the chosen plan, totalled over a step on one device of the
 * critical stage. */
typedef struct PlanColl {
  const char *axis;
  CollKind kind;
  double bytes, count, time;
  Group group;
} PlanColl;
int plan_collectives(const PlanResult *r, const Plan *p, PlanColl *out, int max);
/* Stage i's compute in a step of plan p (s): its micro-batches' forward, backward and
 * recompute, and the update (the optimizer's time of the step). What train --profile
 * holds the stage's kernels and GEMMs to (ProgStage.plan_compute_s). */
double plan_stage_compute(const Plan *p, int i);

/* A compiled plan sums the partial gradients of weights replicated over the
 * tensor-parallel ranks once a step, after the micro-batches (codegen/compose.h):
 * below ZeRO-2 (whose step reduces to owners) and without offload (whose plan places
 * every sum); else in each micro-batch's backward. The driver compiles by this rule
 * and the search prices by it. */
bool plan_tp_sums_once(const PlanChoice *ch);

#endif
