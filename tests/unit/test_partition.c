/* The partition pass (passes/partition.h), in exact arithmetic: a model's plan for
 * TP tensor-parallel ranks and PP pipeline stages (V chunks a stage) is partitioned,
 * and the chunk graphs of every rank are interpreted in double precision (ir/interp.c)
 * side by side, the collectives computed across the ranks' values and the boundary
 * values handed from chunk to chunk (forward in model order, gradients back in reverse).
 * The loss of every rank and every parameter's gradient, assembled from the ranks'
 * parts (the block layout of program/program.h) and summed over the chunks that hold
 * a tied one, must equal the unpartitioned graph's to 1e-9 of the largest gradient of
 * that parameter.
 *
 * Usage: test_partition MODEL TP PP V search|megatron [NAME=VALUE ...]
 * "search" takes the strategies the plan search picks; "megatron" forces Megatron-LM's
 * column-parallel c_attn and c_fc, row-parallel c_proj and attention split by heads,
 * the search choosing the rest. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "frontend/frontend.h"
#include "ir/interp.h"
#include "passes/partition.h"
#include "passes/passes.h"
#include "plan/cluster.h"

static double value_of(const char *name, int64_t i) { /* reproducible, in [-0.25, 0.25] */
  uint64_t h = 1469598103934665603ull;
  for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  h ^= (uint64_t)i * 0x9e3779b97f4a7c15ull;
  h ^= h >> 31, h *= 0xbf58476d1ce4e5b9ull, h ^= h >> 29;
  return ((double)(h >> 11) * 0x1.0p-53 - 0.5) * 0.5;
}

static const Node *find(const Graph *g, const char *name) {
  for (int i = 0; i < g->n; i++)
    if (g->nodes[i]->name && !strcmp(g->nodes[i]->name, name)) return g->nodes[i];
  return NULL;
}

/* Local element e of split parameter n (global shape gs) on rank r of T: its global index. */
static int64_t global_index(const Node *n, const Shape *gs, int64_t e, int r, int T) {
  int64_t idx[MAX_DIMS], gi = 0;
  for (int d = n->shape.ndim - 1; d >= 0; d--) idx[d] = e % n->shape.d[d], e /= n->shape.d[d];
  if (n->split) {
    int d = n->split - 1;
    int64_t c = n->shape.d[d] / n->split_blocks;
    idx[d] = (idx[d] / c) * (c * T) + r * c + idx[d] % c;
  }
  for (int d = 0; d < gs->ndim; d++) gi = gi * gs->d[d] + idx[d];
  return gi;
}

/* ---- the ranks in lockstep -------------------------------------------------------------- */

static void comm_geometry(const Node *n, const Shape *gs, int64_t *outer, int64_t *nb, int64_t *inner) {
  int a = (int)attr_int(n, "axis");
  if (a < 0) a += gs->ndim;
  int64_t b = attr_int(n, "blocks");
  *outer = b, *inner = 1;
  for (int d = 0; d < a; d++) *outer *= gs->d[d];
  for (int d = a + 1; d < gs->ndim; d++) *inner *= gs->d[d];
  *nb = gs->d[a] / b;
}

static void run_comm(const Node *n, double ***v, int T) {
  const Node *x = n->in[0];
  int64_t N = shape_numel(&n->shape), o, nb, in;
  for (int r = 0; r < T; r++) v[r][n->id] = calloc(N ? N : 1, sizeof(double));
  if (n->op == OP_ALL_REDUCE || n->op == OP_TP_COPY) {
    for (int r = 0; r < T; r++)
      for (int64_t i = 0; i < N; i++)
        if (n->op == OP_TP_COPY) v[r][n->id][i] = v[r][x->id][i];
        else
          for (int q = 0; q < T; q++) v[r][n->id][i] += v[q][x->id][i];
    return;
  }
  if (n->op == OP_ALL_TO_ALL) { /* block q of rank r's result is block r of rank q's input */
    int64_t b = N / T;
    for (int r = 0; r < T; r++)
      for (int q = 0; q < T; q++)
        for (int64_t i = 0; i < b; i++) v[r][n->id][q * b + i] = v[q][x->id][r * b + i];
    return;
  }
  comm_geometry(n, n->op == OP_ALL_GATHER ? &n->shape : &x->shape, &o, &nb, &in);
  int64_t p = nb / T;
  for (int r = 0; r < T; r++)
    for (int64_t a = 0; a < o; a++)
      for (int64_t j = 0; j < p; j++)
        for (int64_t i = 0; i < in; i++) {
          int64_t local = (a * p + j) * in + i;
          for (int q = 0; q < T; q++) {
            int64_t whole = (a * nb + q * p + j) * in + i;
            if (n->op == OP_ALL_GATHER) v[r][n->id][(a * nb + q * p + j) * in + i] = v[q][x->id][local];
            else if (n->op == OP_REDUCE_SCATTER) v[r][n->id][local] += v[q][x->id][(a * nb + r * p + j) * in + i];
            else if (q == r) v[r][n->id][local] = v[r][x->id][whole];
          }
        }
}

static void run_nodes(const Graph *h, double ***v, int T, int lo, int hi) {
  const double *in[64];
  for (int i = lo; i < hi; i++) {
    const Node *n = h->nodes[i];
    if (n->op == OP_INPUT || n->op == OP_PARAM) continue;
    if (op_info(n->op)->cls == CLS_COMM) {
      run_comm(n, v, T);
      continue;
    }
    for (int r = 0; r < T; r++) {
      for (int k = 0; k < n->nin; k++) in[k] = v[r][n->in[k]->id];
      v[r][i] = malloc(sizeof(double) * (shape_numel(&n->shape) ? shape_numel(&n->shape) : 1));
      interp_eval(n, in, v[r][i], 0);
    }
  }
}

static double *copy_of(const double *x, int64_t n) {
  double *y = malloc(sizeof *y * (n ? n : 1));
  memcpy(y, x, sizeof *y * n);
  return y;
}

/* ---- the plan ------------------------------------------------------------------------- */

static const char **megatron(Arena *a, const Graph *g) {
  const char **f = arena_array(a, g->n, sizeof *f);
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_ATTENTION) f[i] = "heads";
    if (n->op != OP_MATMUL || n->in[1]->op != OP_PARAM) continue;
    const char *w = n->in[1]->name;
    if (strstr(w, "c_attn.weight") || strstr(w, "c_fc.weight")) f[i] = "column";
    if (strstr(w, "c_proj.weight")) f[i] = "row";
  }
  return f;
}

/* DeepSpeed-Ulysses: the linear layers split along the sequence (their weights whole),
 * attention by heads; the sequence and head splits meet in all_to_alls. */
static const char **ulysses(Arena *a, const Graph *g) {
  const char **f = arena_array(a, g->n, sizeof *f);
  for (int i = 0; i < g->n; i++) {
    const Node *n = g->nodes[i];
    if (n->op == OP_ATTENTION) f[i] = "heads";
    if (n->op == OP_MATMUL && n->in[1]->op == OP_PARAM && n->layer >= 0) f[i] = "split-m";
  }
  return f;
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: test_partition MODEL TP PP V search|megatron|ulysses [NAME=VALUE ...]\n");
    return 2;
  }
  int T = atoi(argv[2]), PP = atoi(argv[3]), V = atoi(argv[4]);
  ConfigOverride ov[16];
  int nov = 0;
  for (int i = 6; i < argc && nov < 15; i++) {
    char *eq = strchr(argv[i], '=');
    if (!eq) return 2;
    *eq = 0;
    ov[nov++] = (ConfigOverride){argv[i], eq + 1, false};
  }
  Arena *a = arena_new();
  diag_stream = stderr;
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) return 1;
  size_t len;
  char *text = frontend_read_file(a, argv[1], &len);
  Graph *g = frontend_compile(a, argv[1], text, len, ov, nov);
  if (!g) return 1;
  Cluster cl;
  cluster_from_profile(&cl, "cpu", T * PP, T * PP);
  PlanForce f;
  plan_force_init(&f);
  f.dp = 1, f.tp = T, f.pp = PP, f.v = V, f.zero = 0, f.rc = RC_NONE, f.exec = true;
  f.schedule = V > 1 ? PS_INTERLEAVED : PS_1F1B;
  /* micro-batches of one sequence with interleaving (which needs a multiple of PP of
   * them), else one of the whole batch; the schedules are tests/unit/test_pipeline.c's */
  int first = 0;
  while (g->nodes[first]->op != OP_INPUT) first++;
  f.mbs = V > 1 ? 1 : (int)g->nodes[first]->shape.d[0];
  if (!strcmp(argv[5], "megatron")) f.op_strategy = megatron(a, g);
  if (!strcmp(argv[5], "ulysses")) f.op_strategy = ulysses(a, g);
  PlanResult *plan = plan_search(a, g, &cl, &f);
  char mbs[16];
  snprintf(mbs, sizeof mbs, "%d", f.mbs);
  int bi = 0;
  while (bi < nov && strcmp(ov[bi].name, "batch")) bi++;
  ov[bi] = (ConfigOverride){"batch", mbs, false};
  if (bi == nov) nov++;
  for (int i = 0; i < nov; i++) ov[i].used = false;
  g = frontend_compile(a, argv[1], text, len, ov, nov); /* the graph of one micro-batch */
  if (!g) return 1;
  Partition *part = pass_partition(g, plan, &plan->best); /* the driver's passes, in its order */
  for (int k = 0; k < part->nchunks; k++) ir_verify(part->chunk[k] = pass_decompose(part->chunk[k], false));
  partition_autodiff(part);

  /* the reference: the whole graph on one rank */
  Graph *ref = pass_decompose(g, false);
  pass_autodiff(ref);
  double **rv = calloc(ref->n, sizeof *rv);
  uint64_t seed = 7;
  for (int i = 0; i < ref->n; i++) {
    const Node *n = ref->nodes[i];
    int64_t N = shape_numel(&n->shape);
    if (n->op == OP_PARAM) {
      rv[i] = malloc(sizeof(double) * N);
      for (int64_t e = 0; e < N; e++) rv[i][e] = (n->init.kind == INIT_ONES ? 1 : 0) + value_of(n->name, e);
    } else if (n->op == OP_INPUT) { /* ids inside every table they index and the loss's classes; floats in [0, 1) */
      int64_t range = 1 << 30, ignore = 0;
      bool indexes = false, targets = false;
      for (int u = 0; u < ref->n; u++) {
        const Node *c = ref->nodes[u];
        if (c->op == OP_EMBEDDING && c->in[1] == n && c->in[0]->shape.d[0] < range) range = c->in[0]->shape.d[0];
        indexes |= c->op == OP_EMBEDDING && c->in[1] == n;
        if (c->op == OP_CROSS_ENTROPY && c->in[1] == n) {
          range =
              c->in[0]->shape.d[c->in[0]->shape.ndim - 1] < range ? c->in[0]->shape.d[c->in[0]->shape.ndim - 1] : range;
          targets = true, ignore = attr_int(c, "ignore_index");
        }
      }
      rv[i] = malloc(sizeof(double) * N);
      for (int64_t e = 0; e < N; e++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        rv[i][e] = n->dtype == DT_I32 ? (double)((seed >> 33) % range) : (double)(seed >> 11) * 0x1.0p-53;
        /* a loss's own targets: a third of them ignored, and the whole second half, so
         * that a rank whose rows the plan splits off may count none */
        if (targets && !indexes && (e % 3 == 0 || 2 * e >= N)) rv[i][e] = (double)ignore;
      }
    }
  }
  interp_run(ref, rv, 0);

  /* the chunks, every rank */
  int K = part->nchunks;
  double ****cv = calloc(K, sizeof *cv); /* [chunk][rank][node] */
  for (int k = 0; k < K; k++) {
    const Graph *h = part->chunk[k];
    cv[k] = calloc(T, sizeof **cv);
    for (int r = 0; r < T; r++) {
      cv[k][r] = calloc(h->n, sizeof ***cv);
      for (int i = 0; i < h->n_forward; i++) {
        const Node *n = h->nodes[i];
        const Node *gn = n->name ? find(ref, n->name) : NULL;
        if (n->op == OP_PARAM) {
          int64_t N = shape_numel(&n->shape);
          cv[k][r][i] = malloc(sizeof(double) * N);
          for (int64_t e = 0; e < N; e++) cv[k][r][i][e] = rv[gn->id][global_index(n, &gn->shape, e, r, T)];
        } else if (n->op == OP_INPUT && gn) {
          cv[k][r][i] = copy_of(rv[gn->id], shape_numel(&n->shape));
        }
      }
    }
  }
  for (int k = 0; k < K; k++) { /* forward, model order */
    const Graph *h = part->chunk[k];
    for (int b = 0; b < part->nbound; b++) {
      const Boundary *bd = &part->bound[b];
      if (bd->to != k) continue;
      for (int r = 0; r < T; r++)
        cv[k][r][h->wrt[bd->wrt]->id] = copy_of(cv[bd->from][r][part->chunk[bd->from]->outs[bd->out]->id], bd->count);
    }
    run_nodes(h, cv[k], T, 0, h->n_forward);
  }
  for (int k = K - 1; k >= 0; k--) { /* backward, in reverse */
    const Graph *h = part->chunk[k];
    for (int b = 0; b < part->nbound; b++) {
      const Boundary *bd = &part->bound[b];
      if (bd->from != k || bd->seed < 0) continue;
      for (int r = 0; r < T; r++)
        cv[k][r][h->seed_grad[bd->seed]->id] =
            copy_of(cv[bd->to][r][part->chunk[bd->to]->wrt_grads[bd->wrt]->id], bd->count);
    }
    run_nodes(h, cv[k], T, h->n_forward, h->n);
  }

  /* compare */
  int fails = 0, checked = 0;
  double worst = 0;
  for (int k = 0; k < K; k++) {
    const Graph *h = part->chunk[k];
    if (!h->loss) continue;
    for (int r = 0; r < T; r++) {
      double got = cv[k][r][h->loss->id][0], want = rv[ref->loss->id][0];
      if (fabs(got - want) > 1e-9 * fabs(want))
        printf("FAIL loss on rank %d: %.15g, not %.15g\n", r, got, want), fails++;
    }
  }
  double top = 0; /* the largest gradient element: a floor for gradients that are zero in exact arithmetic */
  for (int p = 0; p < ref->nparams; p++)
    for (int64_t e = 0; ref->param_grads[p] && e < shape_numel(&ref->params[p]->shape); e++)
      top = fmax(top, fabs(rv[ref->param_grads[p]->id][e]));
  for (int p = 0; p < ref->nparams; p++) {
    const Node *gp = ref->params[p];
    int64_t N = shape_numel(&gp->shape);
    double *sum = calloc(N, sizeof *sum), scale = 0, err = 0;
    int holders = 0;
    for (int k = 0; k < K; k++) {
      const Graph *h = part->chunk[k];
      for (int q = 0; q < h->nparams; q++) {
        const Node *lp = h->params[q];
        if (strcmp(lp->name, gp->name) || !h->param_grads[q]) continue;
        holders++;
        int64_t n = shape_numel(&lp->shape);
        for (int r = 0; r < T; r++)
          for (int64_t e = 0; e < n; e++) {
            double gv = cv[k][r][h->param_grads[q]->id][e];
            int64_t gi = global_index(lp, &gp->shape, e, r, T);
            if (lp->split || r == 0) sum[gi] += gv;
            else if (fabs(gv - cv[k][0][h->param_grads[q]->id][e]) > 1e-12 * (1 + fabs(gv)))
              printf("FAIL %s: replicated gradient differs on rank %d\n", gp->name, r), fails++, r = T, e = n;
          }
      }
    }
    const double *want = rv[ref->param_grads[p]->id];
    for (int64_t e = 0; e < N; e++) scale = fmax(scale, fabs(want[e]));
    scale = fmax(scale, 1e-6 * top);
    for (int64_t e = 0; e < N; e++) err = fmax(err, fabs(sum[e] - want[e]));
    double rel = scale > 0 ? err / scale : err;
    if (!holders || rel > 1e-9)
      printf("FAIL %s: gradient error %.3g of its largest (held by %d chunks)\n", gp->name, rel, holders), fails++;
    if (rel > worst) worst = rel;
    checked++;
    free(sum);
  }
  int comms = 0, a2a = 0;
  for (int k = 0; k < K; k++)
    for (int i = 0; i < part->chunk[k]->n; i++) {
      comms += op_info(part->chunk[k]->nodes[i]->op)->cls == CLS_COMM;
      a2a += part->chunk[k]->nodes[i]->op == OP_ALL_TO_ALL;
    }
  /* Ulysses's sequence and head splits meet in all_to_alls: two a layer forward, two back */
  if (!strcmp(argv[5], "ulysses") && a2a < 4 * g->nlayers)
    printf("FAIL %d all_to_alls for %d layers\n", a2a, g->nlayers), fails++;
  printf(
      "%s tp %d pp %d v %d (%s): %d chunks, %d boundaries, %d collectives (%d all_to_all); loss %.10f; %d gradients, "
      "worst %.2e\n",
      argv[1], T, PP, V, argv[5], K, part->nbound, comms, a2a, rv[ref->loss->id][0], checked, worst);
  diag_pop(&j);
  for (int i = 0; i < ref->n; i++) free(rv[i]);
  free(rv);
  for (int k = 0; k < K; k++) {
    for (int r = 0; r < T; r++) {
      for (int i = 0; i < part->chunk[k]->n; i++) free(cv[k][r][i]);
      free(cv[k][r]);
    }
    free(cv[k]);
  }
  free(cv);
  arena_free(a);
  printf("%s\n", fails ? "FAILED" : "ok");
  return fails != 0;
}
