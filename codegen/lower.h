/* Lowering: a differentiated graph becomes a Program — kernels in the kernel form
 * (codegen/kernel.h), GEMM calls, and the instruction lists of runtime/program.h —
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
#include "program/isa.h"

/* Instructions: the shared instruction set (program/isa.h, runtime/program.h):
 * kernels, GEMMs and zeroing; collectives over the tensor-parallel group; in a pipeline
 * stage's scheduled step, slot changes, input and loss transfers and point-to-point
 * sends and receives; offload's moves; ZeRO's gathers and reductions. */
typedef IsaOp PInstrKind;

typedef struct PComm {
  IsaCommKind kind;
  int tier[2];             /* src, dst */
  int64_t off[2];          /* bytes */
  int64_t outer, n, inner; /* the global tensor, outer x n x inner f32, n split over the group */
  IsaGroup group;          /* ISA_GROUP_TP (0) unless set */
  int stage_group;         /* ISA_GROUP_STAGES: its index in Program.stage_groups */
  int root;                /* broadcast, reduce: the group's rank */
  IsaRed red;              /* all_reduce: ISA_RED_SUM (0) unless set */
} PComm;

typedef struct PGemm {
  int ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  int tier[3];    /* a, b, c */
  int64_t off[3]; /* bytes */
  int64_t batch[2];
  int64_t stride[3][2]; /* elements per batch step, for a, b, c */
  bool bias;            /* the epilogue: C[i][j] += bias[j] (beta 0; the add of a bias) */
  int bias_tier;
  int64_t bias_off; /* bytes */
  bool gelu;        /* then C = gelu(C), tanh form (bias set; one batch): a GELU that reads the add;
                     * on a device without the epilogue, the GEMM leaves GELU's input in aux (or
                     * C) and the "epilogue" kernel after it applies the GELU */
  bool aux;         /* gelu: the add's value (GELU's input) also written to aux, ld ldc */
  int aux_tier;
  int64_t aux_off; /* bytes */
  DType dt[3];     /* a, b, c: f32, or bf16/f16 (a and b alike; f32 accumulation) */
} PGemm;

typedef struct PInstr {
  PInstrKind kind;
  int kernel;                /* ISA_KERNEL */
  int64_t extent;            /* ISA_KERNEL */
  PGemm gemm;                /* ISA_GEMM */
  int tier;                  /* ISA_ZERO, ISA_SEND, ISA_RECV */
  int64_t offset, bytes;     /* ISA_ZERO, ISA_SEND, ISA_RECV (bytes: f32 count x 4); ISA_INPUT, ISA_LOSS offset */
  PComm comm;                /* ISA_COMM */
  int index;                 /* ISA_SLOT: slot; ISA_INPUT: micro-batch; ISA_SEND, ISA_RECV: peer stage */
  int tag;                   /* ISA_SEND, ISA_RECV */
  int input;                 /* ISA_INPUT: the program's input (Program.inputs) */
  int chunk, part, from, to; /* ISA_MOVE, ISA_DROP (from: where), ISA_WAIT (codegen/offload.h);
                              * ISA_ZERO_*: chunk is the parameter (codegen/zero.h) */
  bool keep;                 /* ISA_MOVE */
  bool on_host;              /* ISA_KERNEL in gradnorm and update: run on the host's copies */
  bool epilogue;             /* ISA_KERNEL: the GELU of the "gelu" GEMM before it, skipped by a
                              * device whose GEMMs apply it */
  int node;                  /* the IR node this computes (for the forward subset) */
  int dp_rank, tp_rank;      /* ISA_KERNEL, ISA_GEMM, ISA_ZERO: run only on the ranks with this
                              * coordinate (codegen/compose.h); -1: on every rank */
  bool last_mb;              /* in an unscheduled step: run on the step's last micro-batch only */
  bool train_only;           /* not in `forward` (fp8's amaxes: validation and sampling leave them) */
  bool overlap;              /* ISA_COMM: may run beside the instructions after it (nothing
                              * after it in its list touches its bytes; codegen/compose.h) */
} PInstr;

typedef struct PSeq {
  PInstr *v;
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

/* Appends a zeroed instruction of kind to s (node -1), growing it in arena a. */
PInstr *pseq_push(Arena *a, PSeq *s, PInstrKind kind);

typedef struct PParam {
  const Node *node;
  int64_t offset;
  bool decay;
  int owner;       /* ZeRO: the data-parallel rank that owns it (codegen/zero.h) */
  bool tp_partial; /* its gradient is a tp partial sum until the step's sync (Graph.grad_tp_partial) */
} PParam;
/* A parameter's bytes in PARAMS (f32), and so in GRADS. */
static inline int64_t pparam_bytes(const PParam *q) { return shape_numel(&q->node->shape) * 4; }
/* What train fills an input with (runtime/program.h, "inputs"): from a token file, the
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

typedef struct PChunk {
  const Graph *g;
  int index; /* the chunk's number in the model */
  PSeq fwd, bwd;
  int64_t *inputs;         /* [ninputs of the stage] WORK offsets of the inputs the chunk reads,
                            * -1 for those it does not */
  int64_t loss;            /* offset, -1 when the chunk has none */
  int64_t *wrt, *wrt_grad; /* [g->nwrt] received activations, their gradients (-1: none) */
  int64_t *out, *seed;     /* [g->nouts] sent values; [g->nseeds] received gradients */
} PChunk;

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
  IsaDtype logits_dtype; /* the logits' element type at logits_offset (16-bit under mixed precision) */
  int64_t norm_row;      /* floats per partial sum of the gradient norm, the same for every
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
  bool scheduled;              /* `step` walks every micro-batch (runtime/program.h) */
  int64_t slots;               /* work-tier slots, one per micro-batch in flight */
  struct OffloadPlan *offload; /* where the state lives, instruction by instruction, or NULL */
  bool zero_scheduled;         /* ZeRO's gathers and reductions are in `step` (codegen/zero.h) */
  Kernel **code;               /* [ncode] the kernels' shared codes (program_share_kernels), or NULL */
  int ncode;
  int *code_of;              /* [nkernels] the code kernel i runs */
  PStageGroup *stage_groups; /* [nstage_groups] groups of pipeline stages that collectives
                              * use (ISA_GROUP_STAGES), the same list in every stage */
  int nstage_groups;
  const GraphArch *arch; /* the whole model's architecture (ir/analysis.h), written as the
                          * program's "arch" (runtime/program.h), or NULL */
  PFp8 fp8;              /* --precision fp8's scaling states (rows 0: none) */
} Program;

/* The bytes a collective reads at src (out[0]) and writes at dst (out[1]): the split
 * kinds (all_gather, reduce_scatter, split) part the tensor over the tensor-parallel
 * group, the others read and write the whole. */
void pcomm_bytes(const Program *p, const PComm *c, int64_t out[2]);

/* requires: pass_decompose, pass_autodiff. Errors (an op the code generators do
 * not support yet) are reported at the op's source location. */
Program *lower_program(Graph *g);

/* The chunks of one pipeline stage lowered into one program: their parameters
 * merged by name (a tied parameter is one), each chunk's instructions split into
 * forward and backward (PChunk) with its own region of the work tier; `step` is left
 * for the schedule (codegen/pipeline.h); its inputs are those of the model's (model_inputs)
 * that its chunks read. requires: each graph differentiated. */
Program *lower_stage(Graph **chunks, const int *index, int n, const PInput *model, int nmodel);

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
int lower_update_end(const Program *p, int lo, int hi);

/* Kernels that differ only in their buffers' bindings (tier and offset) share one
 * code (codegen/share.c): p->code, p->ncode and p->code_of, which the emitters and the
 * program JSON use; a kernel instruction then passes its kernel's bindings as
 * arguments. Done once; the kernels themselves (p->kernels) are left as they are. */
void program_share_kernels(Program *p);

/* The program as JSON (runtime/program.h), its kernels shared; malloc'd. */
char *program_to_json(Program *p);
/* A pipeline's programs, one per stage, as the JSON array of runtime/program.h. */
char *programs_to_json(Program *const *p, int n);

#endif
