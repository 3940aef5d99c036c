/* Graph analyses that both the passes (passes/) and the planner (plan/) use, computed
 * from the IR and the op table alone: a model's parameter and FLOP counts, and the
 * attention core that selective recompute runs again. */
#ifndef COLOSSALC_IR_ANALYSIS_H
#define COLOSSALC_IR_ANALYSIS_H
#include "ir/ir.h"

typedef struct GraphStats {
  int64_t params;     /* parameter elements */
  double param_bytes; /* at their declared dtypes */
  double fwd_flops;   /* one forward pass */
  double train_flops; /* forward + backward of one training step */
} GraphStats;

/* Sums over every node of g, with the op table's costs (node_cost). */
void graph_stats(const Graph *g, GraphStats *s);

/* What a model's ops say about its architecture, for the checkpoint formats of other
 * frameworks (the program's "arch", program/program.h; Hugging Face configs,
 * runtime/io/hf.h): a fact is kept when every op that states it agrees. */
typedef enum { ARCH_NONE, ARCH_MIXED, ARCH_LAYERNORM, ARCH_RMSNORM, ARCH_GELU_TANH, ARCH_SILU, ARCH_RELU } ArchKind;
typedef struct GraphArch {
  int64_t heads;          /* the attention ops' heads; 0: none, -1: they differ */
  int64_t kv_heads;       /* their key/value heads (heads without grouped-query attention), as heads */
  int64_t window;         /* their window (the keys a query sees); 0: none, -1: they differ */
  ArchKind norm;          /* ARCH_LAYERNORM or ARCH_RMSNORM, ARCH_NONE, ARCH_MIXED */
  double norm_eps;        /* the norms' eps; < 0: they differ */
  ArchKind act;           /* ARCH_GELU_TANH, ARCH_SILU or ARCH_RELU, ARCH_NONE, ARCH_MIXED */
  double rope_theta;      /* the rotary ops' base; 0: none, < 0: they differ */
  double rope_scaling[4]; /* their scaling, low_freq, high_freq, original_ctx (ops.def), as rope_theta */
  int causal;             /* every attention is causal: 1, none is: 0, some are: -1 */
  bool scaled;            /* some attention gives its own scale (not 1/sqrt(head size)) */
} GraphArch;

/* requires: a forward graph before decompose (attention still one op). */
void graph_arch(const Graph *g, GraphArch *a);
/* "layernorm", "mixed", ... (NULL for ARCH_NONE). */
const char *arch_kind_name(ArchKind k);

/* The nodes of the attention core that ends in softmax node sm: the softmax, the
 * chain of scalings (mul, div, add, sub by a constant) and views (reshape: grouped
 * query heads, passes/decompose.c) between it and the matmul that makes the scores,
 * and that matmul. Writes up to 8 nodes, the matmul first;
 * returns the count, 0 when sm's input is not such a chain. The recompute pass
 * (passes/recompute.c) and the plan's cost model (plan/shard.c) both use this
 * definition. */
int ir_attn_core(const Node *sm, const Node **core);

#endif
