/* Lowering: a differentiated graph becomes a Program — kernels in the kernel form
 * (codegen/kernel.h), GEMM calls, and the instruction lists of program/program.h —
 * with every buffer placed by the memory plan.
 *
 * Fusion is by inlining: elementwise ops (and embedding lookups, broadcasts, rotary)
 * are expressions that their consumers compute in their own loops; a value becomes a
 * buffer only when a GEMM or a view needs memory, when several ops read it, or when
 * it is an output. Reductions and normalisations are kernels of their own. Views
 * (reshape, transpose, slice, broadcast) of buffers are strides, not copies. */
#ifndef COLOSSALC_LOWER_H
#define COLOSSALC_LOWER_H
#include "codegen/kernel.h"
#include "ir/analysis.h"
#include "ir/ir.h"
#include "program/program.h"

/* Instructions: the shared instruction set (program/isa.h), as the program carries
 * them: kernels, GEMMs and zeroing; collectives; in a pipeline stage's schedule, slot
 * changes, input and loss transfers, point-to-point sends and receives, loops and calls;
 * offload's moves; ZeRO's gathers and reductions. Lowering fills in `node` (the IR node
 * an instruction computes) and, for kernels, the index of the kernel in Program.kernels
 * (its code and bindings once program_share_kernels has run). */
typedef struct PSeq {
  IsaInstr *v;
  int n, cap;
} PSeq;

/* fp8's delayed-scaling states (codegen/lower.c, lower_fp8_state): `rows` states of
 * `width` f32 (2 + history) side by side at `state` of the work tier, and this step's
 * running amaxes gathered to `amax` (rows f32) by the step's last kernels, where
 * compose's all_reduce (max) over the mesh finds them before kernel `update` reads them
 * into the histories. The runtime saves and restores the states in checkpoints. */
typedef struct PFp8 {
  int64_t rows, width;
  int64_t state, amax; /* WORK byte offsets (buffer numbers until placed) */
  int update;          /* the kernel that takes the amaxes into the histories */
  PSeq tail;           /* a pipeline stage's: the step's end, after the schedule (in slot 0) */
  int64_t total;       /* the model's states, all stages' (a pipeline's; else rows) */
  int64_t (*runs)[3];  /* [nruns] {the model's row, this stage's row, count}: where this
                        * stage's chunks' states sit among the model's (NULL: rows 0..) */
  int nruns;
} PFp8;

/* Appends a blank instruction of kind op to s (isa_instr: every rank, node -1), growing
 * it in arena a. */
IsaInstr *pseq_push(Arena *a, PSeq *s, IsaOp op);

typedef struct PParam {
  const Node *node;
  int64_t offset;
  bool decay;
  int owner;       /* ZeRO: the data-parallel rank that owns it (codegen/zero.h) */
  bool tp_partial; /* its gradient is a tp partial sum until the step's sync (Graph.grad_tp_partial) */
  int64_t start;   /* a piece of node's tensor (lower_split_params): its elements [start, */
  int64_t numel;   /* start + numel); the whole tensor: 0 and all of them */
} PParam;
/* A parameter's bytes in PARAMS (f32), and so in GRADS. */
static inline int64_t pparam_bytes(const PParam *q) { return q->numel * 4; }
/* What train fills an input with (program/program.h, "inputs"): from a token file, the
 * language model's tokens and its targets (the tokens shifted by one); from a record file
 * every input by its name (PIN_OTHER: only from one). */
typedef enum { PIN_TOKENS, PIN_TARGETS, PIN_OTHER } PInputRole;
typedef struct PInput {
  const Node *node; /* i32 or f32 [batch, ...]: the input node of a graph lowered */
  int64_t offset;   /* WORK bytes (an unscheduled program's), -1 where the
                     * instructions place it (a pipeline stage's "input") */
  PInputRole role;
  int64_t hi;      /* i32: the values it may hold are [0, hi) (each embedding's rows,
                    * each loss's classes); -1: unbounded */
  bool has_ignore; /* and the loss's ignore_index, `ignore`, too */
  int64_t ignore;
} PInput;

/* One pipeline chunk inside a stage's program: its forward and backward
 * instructions, and where (WORK offsets within a slot) its boundary values lie. */
/* Pipeline stages, ascending: the holders of a tied parameter. */
typedef struct PStageGroup {
  int n;
  int *stages;
} PStageGroup;

/* Where a value a chunk exchanges lies: WORK (its micro-batch's slot) or TIER_SHARED
 * (the region the slots share: a value that lives within one pass). */
typedef struct PLoc {
  int tier;
  int64_t offset;
} PLoc;

typedef struct PChunk {
  const Graph *g;
  int index; /* the chunk's number in the model */
  PSeq fwd, bwd;
  PSeq wgrad;           /* split_w (ZB-H1): the weight gradients' part of the backward, bwd the rest */
  int64_t *inputs;      /* [ninputs of the stage] WORK offsets of the inputs the chunk reads,
                         * -1 for those it does not */
  int64_t loss;         /* offset, -1 when the chunk has none */
  PLoc *wrt, *wrt_grad; /* [g->nwrt] received activations, their gradients (offset -1: none) */
  PLoc *out, *seed;     /* [g->nouts] sent values; [g->nseeds] received gradients */
} PChunk;

/* A list the program carries (program/program.h, "Lists"): a named one (train, eval,
 * forward, gather, release) or one they call. */
typedef struct PList {
  const char *name;
  PSeq seq;
  bool proc; /* only called (a pipeline chunk's forward or backward, a micro-batch's step) */
} PList;

typedef struct Program {
  Arena *arena;
  const Graph *g;
  Kernel **kernels;
  int nkernels, kernels_cap;
  PSeq step, sync, gradnorm, update, forward; /* sync: once per step, after the micro-batches
                                               * (codegen/compose.h) */
  int64_t tiers[4];
  int64_t opt_v_offset;
  PParam *params;
  int nparams;
  PInput *inputs;
  int ninputs;
  int64_t loss_offset, logits_offset, gradnorm_offset, gradnorm_parts;
  int64_t trust_offset, trust_parts; /* LAMB: the pinned WORK buffer of its norms' partial sums
                                      * (codegen/compose.h), trust_parts slots of each; 0 parts
                                      * without LAMB */
  IsaDtype logits_dtype;             /* the logits' element type at logits_offset (16-bit under mixed precision) */
  int64_t norm_row;                  /* floats per partial sum of the gradient norm, the same for every
                                      * parameter (lower_norm_kernel), or 0: a partial sum per row of
                                      * each parameter's last dimension */
  int64_t batch, seq, vocab;
  int64_t microbatches;   /* runs of `step` per training step (gradient accumulation) */
  int64_t dp, zero_stage; /* the plan's data-parallel ranks (0: any) and ZeRO stage */
  double flops_per_step;
  int64_t work_peak;     /* bytes of the work tier: the memory plan's peak */
  int64_t tp, pp, stage; /* the mesh's tensor and pipeline degrees, this program's stage */
  PChunk *chunks;        /* [nchunks] a pipeline stage's chunks (lower_stage) */
  int nchunks;
  bool scheduled;              /* `step` walks every micro-batch (program/program.h) */
  int64_t slots;               /* work-tier slots, one per micro-batch in flight */
  int64_t work_shared;         /* work-tier bytes before the slots, which they share (TIER_SHARED) */
  struct OffloadPlan *offload; /* where the state lives, instruction by instruction, or NULL */
  bool zero_scheduled;         /* ZeRO's gathers and reductions are in `step` (codegen/zero.h) */
  Kernel **code;               /* [ncode] the kernels' shared codes (program_share_kernels), or NULL */
  int ncode;
  int *code_of;              /* [nkernels] the code kernel i runs */
  PStageGroup *stage_groups; /* [nstage_groups] groups of pipeline stages that collectives
                              * use (ISA_GROUP_STAGES), the same list in every stage */
  int nstage_groups;
  const GraphArch *arch; /* the whole model's architecture (ir/analysis.h), written as the
                          * program's "arch" (program/program.h), or NULL */
  PFp8 fp8;              /* --precision fp8's scaling states (rows 0: none) */
  PList *lists;          /* [nlists] what the program carries: the pipeline schedule's
                          * procedures (lower_pipeline), then the lists compose_lists makes
                          * of step, sync, gradnorm, update and forward (codegen/compose.h) */
  int nlists, lists_cap;
  int named[PROG_NLISTS];   /* each named list's index in lists, -1 until made */
  int64_t staging;          /* device scratch of the collectives' reorders (compose_lists) */
  double plan_step;         /* the plan's predicted step time (s), 0 without a plan */
  double plan_compute;      /* the plan's compute of a step on this stage (s, ProgStage.plan_compute_s) */
  const char *plan_cluster; /* and the cluster it was planned for, else NULL */
} Program;

/* requires: pass_decompose, pass_autodiff. Errors (an op the code generators do
 * not support yet) are reported at the op's source location. */
Program *lower_program(Graph *g);

/* The chunks of one pipeline stage lowered into one program: their parameters
 * merged by name (a tied parameter is one), each chunk's instructions split into
 * forward and backward (PChunk) with its own region of each of the `slots` slots of the
 * work tier, and the working set of their passes in the region the slots share
 * (program/program.h), unless one region per chunk in each slot takes less; `step` is
 * left for the schedule (codegen/pipeline.h); its inputs are those of the model's
 * (model_inputs) that its chunks read. With split_w (ZB-H1) each backward is two
 * passes: B, the nodes the gradients sent to the previous stage depend on, and W
 * (PChunk.wgrad), the rest (the weight gradients), lowered after B, so that what W reads
 * of B's stays in the micro-batch's slot. requires: each graph differentiated. */
Program *lower_stage(Graph **chunks, const int *index, int n, const PInput *model, int nmodel, int64_t slots,
                     bool split_w);

/* The work tier's bytes: its slots and the region they share. */
static inline int64_t program_work_bytes(const Program *p) {
  return p->tiers[TIER_WORK] * (p->slots > 0 ? p->slots : 1) + p->work_shared;
}

/* Every input of the model whose chunks (all of them, of every stage) are gs, once, as
 * train feeds it: dtype i32 or f32, the batch its first dimension (errors otherwise, at
 * the input), its role (the loss's targets, an i32 input indexing an embedding with as
 * many rows as the loss has classes in the targets' shape: the tokens, else data; targets
 * only beside tokens) and the values an i32 input may hold. Nodes are gs's. */
PInput *model_inputs(Graph *const *gs, int ng, int *n);

/* The optimizer of a lowered program over its consecutive parameters [lo, hi) (one range of
 * each tier) in one multi-tensor kernel, numbered index (for its name): lowering emits one
 * kernel per parameter, and compose (codegen/compose.h) makes each run of parameters that the
 * same ranks update one; hi = lo + 1 builds the parameter's own kernel, for any hi the
 * values of one kernel per parameter, bit for bit. lower_norm_kernel: the gradient norm's
 * partial sums, into the parameters' slots of the parts (runs need p->norm_row);
 * lower_update_kernel: AdamW or SGD over rows of 16 floats, the weight decay selected by row,
 * the run ending no later than lower_update_end(p, lo, hi) (before a change of decay that a
 * row coordinate in f32 would not place exactly). Both narrowed (kernel_narrow). */
Kernel *lower_norm_kernel(Program *p, int lo, int hi, int index);
Kernel *lower_update_kernel(Program *p, int lo, int hi, int index);
/* LAMB's kernels of parameter k besides its update (whose kernel in `update` is
 * "lamb": w - lr r u): norm false, "lambmoments" (m and v from the gradient); true,
 * "lambnorm" (the partial sums of |w|^2 and |u|^2 by row into the trust buffer, whose
 * "trust" instruction turns them into each parameter's ratio r; codegen/compose.h). */
Kernel *lower_lamb_kernel(Program *p, int k, bool norm, int index);
/* LAMB: parameter k's first slot of the trust buffer (k = nparams: the slots of all). */
int64_t lower_trust_slot(const Program *p, int k);
int lower_update_end(const Program *p, int lo, int hi);

/* Parameter k of p made pieces[k] pieces (at most; 1 or less: left whole) of about equal
 * size: consecutive parameters of the one node, each a range of its elements, [start,
 * start + numel), of whole rows of its first dimension (so that ZeRO can deal a parameter
 * larger than a rank's share to several owners: codegen/zero.h); the gradient norm's and
 * the update's kernels made again, one per piece, the same values bit for bit.
 * requires: lower_program, one unscheduled program without offload (no pipeline), its
 * parameters whole. */
void lower_split_params(Program *p, const int *pieces);

/* Kernels that differ only in their buffers' bindings (tier and offset) share one
 * code (codegen/share.c): p->code, p->ncode and p->code_of, which the emitters and the
 * program use (ProgKernel: a code and its bindings). Done once; the kernels themselves
 * (p->kernels) are left as they are. */
void program_share_kernels(Program *p);

/* The programs of one compilation (one, or a pipeline's stages sharing one kernel
 * table) in the program format (program/program.h), malloc'd, *bytes long. requires:
 * compose_lists, program_share_kernels (codegen/program.c). */
void *program_write(Program *const *ps, int n, int64_t *bytes);

/* Appends a list named name (a procedure when proc: only called) to p->lists; returns
 * its index. */
int program_add_list(Program *p, const char *name, bool proc);

#endif
