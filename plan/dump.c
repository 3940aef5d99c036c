/* The three forms of `--dump-plan` and the reader of plan files (plan/dump.h).
 * Every number printed comes from the PlanResult the search priced. */
#include "plan/dump.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static const char *seg_name(const PlanResult *r, int k) {
  const Segment *s = &r->pm->seg[k];
  if (s->kind == SEG_LAYER) return r->g->layers[s->layer].name;
  return s->kind == SEG_BEFORE ? "(before layers)" : "(after layers)";
}

/* The precisions of plan files ("precision"), by DType (DT_E4M3: fp8), and as printed. */
static const char *const precision_names[] = {"fp32", "bf16-mixed", "fp16-mixed", "fp8-mixed"};
static const DType precision_dtypes[] = {DT_F32, DT_BF16, DT_F16, DT_E4M3};

static int precision_index(int dt) {
  for (int i = 0; i < 4; i++)
    if ((int)precision_dtypes[i] == dt) return i;
  return 0;
}

/* The precision a plan is priced in. */
/* The optimizer as the plan's text names it. */
static const char *opt_text(const PlanResult *r) {
  static const char *const names[OPT_COUNT] = {"AdamW", "SGD", "LAMB"};
  return names[r->g->train.opt];
}

static const char *precision_text(const PlanResult *r) {
  static const char *const text[] = {"fp32", "bf16 mixed precision", "fp16 mixed precision",
                                     "fp8 mixed precision (the linear layers' GEMMs in fp8, the rest bf16)"};
  return text[precision_index(r->precision)];
}

/* A readable label for op n: the parameter it applies, else its op name. */
static const char *op_label(const Node *n) {
  for (int i = 0; i < n->nin; i++)
    if (n->in[i]->op == OP_PARAM) return n->in[i]->name;
  return "";
}

static const char *human(char *buf, size_t len, double v, const char *unit) {
  const char *pre[] = {"", "K", "M", "G", "T", "P", "E"};
  int k = 0;
  while (fabs(v) >= 1000 && k < 6) v /= 1000, k++;
  snprintf(buf, len, "%.3g%s%s%s", v, k || unit[0] ? " " : "", pre[k], unit);
  return buf;
}

/* Segments with the same structure and the same chosen strategies print once. */
static bool same_sharding(const PlanResult *r, const Plan *p, int a, int b) {
  const Segment *x = &r->pm->seg[a], *y = &r->pm->seg[b];
  if (x->sig != y->sig) return false;
  for (int j = 0; j < x->nops; j++)
    if (p->sc->st[x->ops[j]] != p->sc->st[y->ops[j]]) return false;
  return true;
}

static int group_of(const PlanResult *r, const Plan *p, int k) {
  for (int j = 0; j < k; j++)
    if (same_sharding(r, p, j, k)) return j;
  return k;
}

static const char *layer_range(const PlanResult *r, int first, int n, char *buf, size_t len) {
  if (n <= 0) return "(no layers)";
  const Graph *g = r->g;
  if (n == 1) snprintf(buf, len, "%s", g->layers[first].name);
  else snprintf(buf, len, "%s .. %s (%d layers)", g->layers[first].name, g->layers[first + n - 1].name, n);
  return buf;
}

/* ---- text ----------------------------------------------------------------------- */

static void text_header(FILE *f, const PlanResult *r) {
  const Cluster *cl = r->cl;
  const Plan *p = &r->best;
  const PlanChoice *c = &p->ch;
  char a[32], b[32];
  fprintf(f, "plan for %s (%s) on %s\n", r->g->name, r->g->source ? r->g->source : "?", cl->name);
  fprintf(f, "  cluster: %d devices, %d node%s of %d; %s, %s peak; %s inside a node, %s between nodes\n", cl->gpus,
          cluster_nodes(cl), cluster_nodes(cl) == 1 ? "" : "s", cl->gpus_per_node, cl->dev.part,
          human(a, sizeof a, cluster_peak(cl), "FLOP/s"), cl->intra.name, cl->inter.name);
  fprintf(f, "  model: %s parameters, %d layers, global batch %lld, %s per step (forward + backward)\n",
          human(a, sizeof a, r->pm->params, ""), r->pm->nlayer_segs, (long long)r->pm->batch,
          human(b, sizeof b, r->stats.train_flops, "FLOP"));
  fprintf(f, "mesh: dp %d x tp %d x pp %d (ranks: tensor-parallel fastest, then data-parallel, then pipeline)\n", c->dp,
          c->tp, c->pp);
  fprintf(f, "ZeRO stage %d; %d micro-batch%s of %d; recompute %s; schedule %s", c->zero, c->m, c->m == 1 ? "" : "es",
          c->mbs, recompute_names[c->rc], schedule_names[c->sched]);
  if (c->v > 1) fprintf(f, " with %d chunks per stage", c->v);
  fprintf(f, "; %s; attention %s\n", precision_text(r), attn_kernel_names[c->attn]);
  if (c->offload == OFFLOAD_OPTIMIZER)
    fprintf(f,
            "offload: the optimizer state (%.0f bytes a parameter) on the host, %s on the CPU: %.1f GiB of host "
            "memory a node\n",
            r->o_bytes, opt_text(r), p->pr.host / GIB);
  if (c->offload == OFFLOAD_STATE) {
    const PlanPrice *pr = &p->pr;
    double hidden = pr->link_time > 0 ? 1 - pr->offload / pr->link_time : 1;
    fprintf(f,
            "offload: every rank's ZeRO-3 shard of the parameters, gradients and optimizer state (%.0f bytes a "
            "parameter) lives on its node: %.1f GiB of host memory a node (of %.0f GiB)",
            r->w_bytes + r->g_bytes + r->o_bytes, pr->host / GIB, cl->host_memory / GIB);
    if (pr->nvme > 0) fprintf(f, " and %.1f GiB of NVMe (of %.0f GiB)", pr->nvme / GIB, cl->nvme / GIB);
    fprintf(f, "; %s on the CPU\n  every rank: its shard's home is %.2f GiB of host memory", opt_text(r),
            pr->host / cl->gpus_per_node / GIB);
    if (pr->nvme > 0)
      fprintf(f, " and %.2f GiB of NVMe (part of its optimizer state)", pr->nvme / cl->gpus_per_node / GIB);
    fprintf(f,
            "; a step moves %.2f GiB over its host link (%.3g s, %.0f%% hidden by "
            "compute: the next layer's weights come up while this one computes)",
            pr->link_bytes / GIB, pr->link_time, 100 * hidden);
    if (pr->nvme > 0) fprintf(f, "; the node's NVMe part read and written once (%.3g s)", pr->nvme_time);
    fprintf(f, "\n");
  }
}

static void text_time(FILE *f, const PlanResult *r) {
  const PlanPrice *pr = &r->best.pr;
  double comm = pr->tp_comm + pr->p2p + pr->dp_comm;
  fprintf(f, "predicted step time %.4g s: %.1f TFLOP/s per GPU, MFU %.1f%% (with recompute %.1f TFLOP/s)\n", pr->step,
          pr->tflops, 100 * pr->mfu, pr->hw_tflops);
  fprintf(f, "  %-26s %10.4g s %5.1f%%\n", "compute", pr->compute, 100 * pr->compute / pr->step);
  fprintf(f, "  %-26s %10.4g s %5.1f%%\n", "recompute", pr->recompute, 100 * pr->recompute / pr->step);
  fprintf(f, "  %-26s %10.4g s %5.1f%%  (tensor parallel %.4g, pipeline %.4g, data parallel %.4g)\n",
          "exposed communication", comm, 100 * comm / pr->step, pr->tp_comm, pr->p2p, pr->dp_comm);
  fprintf(f, "  %-26s %10.4g s %5.1f%%\n", "pipeline bubble", pr->bubble, 100 * pr->bubble / pr->step);
  fprintf(f, "  %-26s %10.4g s %5.1f%%\n", "optimizer step", pr->optimizer, 100 * pr->optimizer / pr->step);
  if (r->best.ch.offload == OFFLOAD_STATE)
    fprintf(f, "  %-26s %10.4g s %5.1f%%\n", "exposed host transfers", pr->offload, 100 * pr->offload / pr->step);
  fprintf(f, "  (on stage %d, the slowest)\n", pr->critical_stage);
}

static void text_stages(FILE *f, const PlanResult *r) {
  const Plan *p = &r->best;
  char buf[160];
  fprintf(f, "stages (layers; time per micro-batch; memory per device in GiB):\n");
  fprintf(f, "  %5s  %-34s %10s %8s %8s %8s %8s %8s %8s\n", "stage", "layers", "ms/micro", "weights", "grads", "optim",
          "activ", "buffers", "total");
  for (int i = 0; i < p->ch.pp; i++) {
    const StageCost *s = &p->stage[i];
    char lay[200] = "";
    for (int k = i; k < p->nchunks; k += p->ch.pp) {
      int lo = p->chunk_lo[k], hi = p->chunk_hi[k];
      snprintf(lay + strlen(lay), sizeof lay - strlen(lay), "%s%s", lay[0] ? ", " : "",
               layer_range(r, r->pm->nlayer_segs ? r->pm->seg[r->pm->first_layer_seg + lo].layer : 0, hi - lo, buf,
                           sizeof buf));
    }
    if (i == 0 && r->pm->nseg > 0) snprintf(lay + strlen(lay), sizeof lay - strlen(lay), " +before");
    if (i == p->ch.pp - 1 && r->pm->nseg > 1) snprintf(lay + strlen(lay), sizeof lay - strlen(lay), " +after");
    fprintf(f, "  %5d  %-34s %10.4g %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", i, lay, 1e3 * s->time, s->weights / GIB,
            s->grads / GIB, s->optimizer / GIB, s->activations / GIB, s->buffers / GIB, s->total / GIB);
  }
  fprintf(f, "memory per device: peak %.2f GiB on stage %d, %.2f GiB usable (%.0f GiB less %.1f GiB reserved)\n",
          p->pr.peak / GIB, p->pr.peak_stage, r->usable / GIB, r->cl->dev.memory / GIB, r->cl->dev.reserved / GIB);
}

static void text_sharding(FILE *f, const PlanResult *r) {
  const Plan *p = &r->best;
  const PlanModel *pm = r->pm;
  char pb[16], ib[16];
  fprintf(f, "sharding along the tensor-parallel axis (op: strategy -> output placement; inputs):\n");
  for (int k = 0; k < pm->nseg; k++) {
    if (group_of(r, p, k) != k || pm->seg[k].nops == 0) continue;
    int n = 0;
    for (int j = k; j < pm->nseg; j++) n += group_of(r, p, j) == k;
    fprintf(f, "  %s", seg_name(r, k));
    if (n > 1) fprintf(f, " and %d more segments with the same sharding", n - 1);
    fprintf(f, ":\n");
    for (int j = 0; j < pm->seg[k].nops; j++) {
      const Node *node = r->g->nodes[pm->seg[k].ops[j]];
      const Strat *s = p->sc->st[node->id];
      fprintf(f, "    %%%-5d %-14s %-11s -> %-5s (", node->id, op_info(node->op)->name, s->name,
              placement_name(s->out, pb));
      for (int i = 0; i < node->nin; i++) fprintf(f, "%s%s", i ? ", " : "", placement_name(s->in[i], ib));
      fprintf(f, ")%s%s\n", op_label(node)[0] ? "  " : "", op_label(node));
    }
  }
}

static void text_collectives(FILE *f, const PlanResult *r) {
  PlanColl c[48];
  char b[32];
  int n = plan_collectives(r, &r->best, c, 48);
  fprintf(f, "collectives per step on one device of stage %d (time before overlap):\n", r->best.pr.critical_stage);
  for (int i = 0; i < n; i++)
    fprintf(f, "  %-4s %-15s %12s x %-8.0f %10.4g s  (group of %d, %d per node)\n", c[i].axis, coll_names[c[i].kind],
            human(b, sizeof b, c[i].bytes, "B"), c[i].count, c[i].time, c[i].group.n, c[i].group.local);
  if (!n) fprintf(f, "  none\n");
}

static void choice_text(const PlanChoice *c, char *buf, size_t len) {
  int k = snprintf(buf, len, "dp %d x tp %d x pp %d, ZeRO-%d, %d x %d, recompute %s, %s", c->dp, c->tp, c->pp, c->zero,
                   c->m, c->mbs, recompute_names[c->rc], schedule_names[c->sched]);
  if (c->v > 1 && k > 0 && (size_t)k < len) snprintf(buf + k, len - k, " v=%d", c->v);
}

void plan_dump_text(FILE *f, const PlanResult *r) {
  text_header(f, r);
  text_time(f, r);
  text_stages(f, r);
  text_sharding(f, r);
  text_collectives(f, r);
  fprintf(f, "runners-up:\n");
  for (int i = 0; i < r->nru; i++) {
    char buf[160];
    choice_text(&r->ru[i].plan.ch, buf, sizeof buf);
    fprintf(f, "  %-64s %8.4g s  %s\n", buf, r->ru[i].plan.pr.step, r->ru[i].why);
  }
  if (!r->nru) fprintf(f, "  none (every other plan was the same or impossible)\n");
  fprintf(f, "search: %ld plans priced, %ld fit, %.3f s\n", r->evaluated, r->feasible, r->search_s);
}

void plan_dump_brief(FILE *f, const PlanResult *r) {
  const Plan *p = &r->best;
  const PlanChoice *c = &p->ch;
  int ranks = c->dp * c->tp * c->pp;
  fprintf(f, "plan for %s on %s: dp %d x tp %d x pp %d (%d rank%s), ZeRO-%d, %d micro-batch%s of %d, recompute %s",
          r->g->name, r->cl->name, c->dp, c->tp, c->pp, ranks, ranks == 1 ? "" : "s", c->zero, c->m,
          c->m == 1 ? "" : "es", c->mbs, recompute_names[c->rc]);
  if (c->pp > 1) fprintf(f, ", schedule %s%s", schedule_names[c->sched], c->v > 1 ? " (interleaved chunks)" : "");
  if (c->offload)
    fprintf(f, c->offload == OFFLOAD_OPTIMIZER ? ", optimizer on the host" : ", state on the host%s",
            r->best.pr.nvme > 0 ? " and NVMe" : "");
  fprintf(f, "\n  priced in %s with attention %s: %.4g s a step (MFU %.1f%%), %.2f GiB per device of %.2f GiB usable\n",
          precision_text(r), attn_kernel_names[c->attn], p->pr.step, 100 * p->pr.mfu, p->pr.peak / GIB,
          r->usable / GIB);
}

/* ---- JSON ------------------------------------------------------------------------- */

static cJSON *choice_json(cJSON *o, const PlanChoice *c) {
  cJSON *mesh = cJSON_AddObjectToObject(o, "mesh");
  cJSON_AddNumberToObject(mesh, "dp", c->dp);
  cJSON_AddNumberToObject(mesh, "tp", c->tp);
  cJSON_AddNumberToObject(mesh, "pp", c->pp);
  cJSON_AddNumberToObject(o, "zero_stage", c->zero);
  cJSON_AddNumberToObject(o, "microbatch_size", c->mbs);
  cJSON_AddNumberToObject(o, "microbatches", c->m);
  cJSON_AddStringToObject(o, "recompute", recompute_names[c->rc]);
  cJSON_AddStringToObject(o, "schedule", schedule_names[c->sched]);
  cJSON_AddNumberToObject(o, "virtual_stages", c->v);
  cJSON_AddStringToObject(o, "attention", attn_kernel_names[c->attn]);
  cJSON_AddStringToObject(o, "offload", offload_names[c->offload]);
  return o;
}

static void price_json(cJSON *o, const PlanPrice *pr, double batch) {
  cJSON *p = cJSON_AddObjectToObject(o, "predicted");
  cJSON_AddNumberToObject(p, "step_time_s", pr->step);
  cJSON_AddNumberToObject(p, "tflops_per_gpu", pr->tflops);
  cJSON_AddNumberToObject(p, "hw_tflops_per_gpu", pr->hw_tflops);
  cJSON_AddNumberToObject(p, "mfu", pr->mfu);
  cJSON_AddNumberToObject(p, "sequences_per_s", batch / pr->step);
  cJSON_AddNumberToObject(p, "critical_stage", pr->critical_stage);
  cJSON *b = cJSON_AddObjectToObject(p, "breakdown");
  cJSON_AddNumberToObject(b, "compute_s", pr->compute);
  cJSON_AddNumberToObject(b, "recompute_s", pr->recompute);
  cJSON_AddNumberToObject(b, "tp_comm_s", pr->tp_comm);
  cJSON_AddNumberToObject(b, "pipeline_p2p_s", pr->p2p);
  cJSON_AddNumberToObject(b, "dp_comm_s", pr->dp_comm);
  cJSON_AddNumberToObject(b, "bubble_s", pr->bubble);
  cJSON_AddNumberToObject(b, "optimizer_s", pr->optimizer);
  cJSON_AddNumberToObject(b, "offload_exposed_s", pr->offload);
  if (pr->host > 0 || pr->link_bytes > 0) {
    cJSON *off = cJSON_AddObjectToObject(p, "offload");
    cJSON_AddNumberToObject(off, "host_bytes_per_node", pr->host);
    cJSON_AddNumberToObject(off, "nvme_bytes_per_node", pr->nvme);
    cJSON_AddNumberToObject(off, "host_link_bytes_per_device", pr->link_bytes);
    cJSON_AddNumberToObject(off, "host_link_s", pr->link_time);
    cJSON_AddNumberToObject(off, "exposed_s", pr->offload);
    cJSON_AddNumberToObject(off, "nvme_s", pr->nvme_time);
  }
}

static void stages_json(cJSON *o, const PlanResult *r, const Plan *p) {
  cJSON *arr = cJSON_AddArrayToObject(o, "stages");
  for (int i = 0; i < p->ch.pp; i++) {
    const StageCost *s = &p->stage[i];
    cJSON *st = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "stage", i);
    cJSON *lay = cJSON_AddArrayToObject(st, "layers");
    if (i == 0) cJSON_AddItemToArray(lay, cJSON_CreateString("(before layers)"));
    for (int k = i; k < p->nchunks; k += p->ch.pp)
      for (int l = p->chunk_lo[k]; l < p->chunk_hi[k]; l++)
        cJSON_AddItemToArray(lay, cJSON_CreateString(seg_name(r, r->pm->first_layer_seg + l)));
    if (i == p->ch.pp - 1 && r->pm->nseg > 1) cJSON_AddItemToArray(lay, cJSON_CreateString("(after layers)"));
    cJSON_AddNumberToObject(st, "time_per_microbatch_s", s->time);
    cJSON_AddNumberToObject(st, "forward_s", s->t_fwd);
    cJSON_AddNumberToObject(st, "backward_s", s->t_bwd);
    cJSON_AddNumberToObject(st, "tp_comm_s", s->tp_comm);
    cJSON_AddNumberToObject(st, "recompute_s", s->t_rc);
    cJSON_AddNumberToObject(st, "p2p_s", s->p2p);
    cJSON_AddNumberToObject(st, "compute_per_step_s", plan_stage_compute(p, i));
    cJSON_AddNumberToObject(st, "parameters_per_device", s->params);
    cJSON *m = cJSON_AddObjectToObject(st, "memory");
    cJSON_AddNumberToObject(m, "weights_bytes", s->weights);
    cJSON_AddNumberToObject(m, "gradients_bytes", s->grads);
    cJSON_AddNumberToObject(m, "optimizer_bytes", s->optimizer);
    cJSON_AddNumberToObject(m, "activations_bytes", s->activations);
    cJSON_AddNumberToObject(m, "buffers_bytes", s->buffers);
    cJSON_AddNumberToObject(m, "total_bytes", s->total);
    cJSON_AddItemToArray(arr, st);
  }
}

static void sharding_json(cJSON *o, const PlanResult *r, const Plan *p) {
  const PlanModel *pm = r->pm;
  cJSON *arr = cJSON_AddArrayToObject(o, "sharding");
  char pb[16];
  for (int k = 0; k < pm->nseg; k++) {
    if (group_of(r, p, k) != k || pm->seg[k].nops == 0) continue;
    cJSON *g = cJSON_CreateObject(), *segs = cJSON_AddArrayToObject(g, "segments");
    cJSON *ops = cJSON_AddArrayToObject(g, "ops");
    for (int j = k; j < pm->nseg; j++)
      if (group_of(r, p, j) == k) cJSON_AddItemToArray(segs, cJSON_CreateString(seg_name(r, j)));
    for (int j = 0; j < pm->seg[k].nops; j++) {
      const Node *n = r->g->nodes[pm->seg[k].ops[j]];
      const Strat *s = p->sc->st[n->id];
      cJSON *op = cJSON_CreateObject();
      cJSON_AddNumberToObject(op, "index", j);
      cJSON_AddNumberToObject(op, "node", n->id);
      cJSON_AddStringToObject(op, "op", op_info(n->op)->name);
      if (op_label(n)[0]) cJSON_AddStringToObject(op, "parameter", op_label(n));
      cJSON_AddStringToObject(op, "strategy", s->name);
      cJSON_AddStringToObject(op, "output", placement_name(s->out, pb));
      cJSON *in = cJSON_AddArrayToObject(op, "inputs");
      for (int i = 0; i < n->nin; i++) cJSON_AddItemToArray(in, cJSON_CreateString(placement_name(s->in[i], pb)));
      cJSON_AddItemToArray(ops, op);
    }
    cJSON_AddItemToArray(arr, g);
  }
}

static void collectives_json(cJSON *o, const PlanResult *r) {
  PlanColl c[48];
  int n = plan_collectives(r, &r->best, c, 48);
  cJSON *arr = cJSON_AddArrayToObject(o, "collectives");
  for (int i = 0; i < n; i++) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddStringToObject(x, "axis", c[i].axis);
    cJSON_AddStringToObject(x, "kind", coll_names[c[i].kind]);
    cJSON_AddNumberToObject(x, "bytes", c[i].bytes);
    cJSON_AddNumberToObject(x, "count_per_step", c[i].count);
    cJSON_AddNumberToObject(x, "time_per_step_s", c[i].time);
    cJSON_AddNumberToObject(x, "group_size", c[i].group.n);
    cJSON_AddItemToArray(arr, x);
  }
}

static void header_json(cJSON *o, const PlanResult *r) {
  const Cluster *cl = r->cl;
  cJSON_AddStringToObject(o, "schema", "colossalc-plan-1");
  cJSON *m = cJSON_AddObjectToObject(o, "model");
  cJSON_AddStringToObject(m, "name", r->g->name);
  cJSON_AddStringToObject(m, "source", r->g->source ? r->g->source : "");
  cJSON_AddNumberToObject(m, "layers", r->pm->nlayer_segs);
  cJSON_AddNumberToObject(m, "global_batch", (double)r->pm->batch);
  cJSON_AddNumberToObject(m, "train_flops_per_step", r->stats.train_flops);
  cJSON_AddNumberToObject(o, "parameters", r->pm->params);
  cJSON *c = cJSON_AddObjectToObject(o, "cluster");
  cJSON_AddStringToObject(c, "name", cl->name);
  cJSON_AddNumberToObject(c, "gpus", cl->gpus);
  cJSON_AddNumberToObject(c, "gpus_per_node", cl->gpus_per_node);
  cJSON_AddStringToObject(c, "gpu", cl->dev.name);
  cJSON_AddStringToObject(c, "part", cl->dev.part);
  cJSON_AddNumberToObject(c, "peak_tflops", cluster_peak(cl) / 1e12);
  cJSON_AddNumberToObject(c, "memory_bytes", cl->dev.memory);
  cJSON_AddStringToObject(o, "precision", precision_names[precision_index(r->precision)]);
}

char *plan_to_json(const PlanResult *r) {
  const Plan *p = &r->best;
  cJSON *o = cJSON_CreateObject();
  header_json(o, r);
  choice_json(o, &p->ch);
  price_json(o, &p->pr, (double)r->pm->batch);
  cJSON *mem = cJSON_AddObjectToObject(o, "memory");
  cJSON_AddNumberToObject(mem, "peak_bytes_per_device", p->pr.peak);
  cJSON_AddNumberToObject(mem, "peak_stage", p->pr.peak_stage);
  cJSON_AddNumberToObject(mem, "usable_bytes", r->usable);
  cJSON_AddNumberToObject(mem, "capacity_bytes", r->cl->dev.memory);
  stages_json(o, r, p);
  sharding_json(o, r, p);
  collectives_json(o, r);
  cJSON *ru = cJSON_AddArrayToObject(o, "runners_up");
  for (int i = 0; i < r->nru; i++) {
    cJSON *x = choice_json(cJSON_CreateObject(), &r->ru[i].plan.ch);
    cJSON_AddNumberToObject(x, "step_time_s", r->ru[i].plan.pr.step);
    cJSON_AddNumberToObject(x, "peak_bytes_per_device", r->ru[i].plan.pr.peak);
    cJSON_AddBoolToObject(x, "fits", r->ru[i].plan.pr.fits);
    cJSON_AddStringToObject(x, "why", r->ru[i].why);
    cJSON_AddItemToArray(ru, x);
  }
  cJSON *s = cJSON_AddObjectToObject(o, "search");
  cJSON_AddNumberToObject(s, "plans_priced", (double)r->evaluated);
  cJSON_AddNumberToObject(s, "plans_fitting", (double)r->feasible);
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  return text;
}

/* ---- SVG: the pipeline timeline of one step and memory per device ----------------------- */

typedef struct Op {
  int fwd, w, chunk, mb; /* w: a weight-gradient pass (ZB-H1), not a backward's B */
  double start, end;
} Op;

/* Forward, backward and, under ZB-H1, weight-gradient (W, in *wt and not in *b) time of
 * chunk k per micro-batch: its layers, tensor-parallel communication, recompute, and its
 * share of the stage's transfers; W as the plan prices it (SegCost.t_w). */
static void chunk_times(const PlanResult *r, const Plan *p, int k, double *f, double *b, double *wt, double *stash) {
  const PlanModel *pm = r->pm;
  *f = *b = *wt = *stash = 0;
  for (int s = 0; s < pm->nseg; s++) {
    bool in = (pm->seg[s].kind == SEG_LAYER && s - pm->first_layer_seg >= p->chunk_lo[k] &&
               s - pm->first_layer_seg < p->chunk_hi[k]) ||
              (s == 0 && k == 0) || (s == pm->nseg - 1 && s > 0 && k == p->nchunks - 1);
    if (!in) continue;
    const SegCost *c = &p->sc->seg[s];
    *f += c->t_fwd + c->c_fwd, *b += c->t_bwd + c->c_bwd + c->t_rc, *stash += c->stash;
    if (p->ch.sched == PS_ZBH1) *wt += c->t_w;
  }
  double p2p = p->stage[k % p->ch.pp].p2p / p->ch.v / 2;
  *f += p2p, *b += p2p - *wt;
}

/* The order of the passes on stage i: the schedule the program runs (plan/schedule.h),
 * each pass's chunk as the stage's own index. */
static int stage_order(const Plan *p, int i, Op *ops) {
  int P = p->ch.pp, v = p->ch.v, m = p->ch.m, n = pipe_actions(v, m, p->ch.sched);
  PipeAction *acts = malloc((size_t)n * sizeof *acts);
  if (!acts) error_plain("out of memory drawing the pipeline");
  pipe_schedule(P, v, m, p->ch.sched, i, acts);
  for (int k = 0; k < n; k++) ops[k] = (Op){acts[k].fwd, acts[k].w, acts[k].chunk / P, acts[k].mb, 0, 0};
  free(acts);
  return n;
}

/* Start and end of every pass: each waits for its stage and for its input (a W for its
 * micro-batch's B). cf, cb, cw: forward, backward (B) and W time of each chunk. */
static double simulate(const Plan *p, Op **ops, const int *nops, const double *cf, const double *cb, const double *cw,
                       double *fend, double *bend) {
  int P = p->ch.pp, m = p->ch.m, K = P * p->ch.v, done = 0, total = 0, *next = calloc(P, sizeof(int));
  double *free_at = calloc(P, sizeof(double)), span = 0;
  for (int i = 0; i < P; i++) total += nops[i];
  for (int i = 0; i < K * m; i++) fend[i] = bend[i] = -1;
  while (done < total) {
    int progress = 0;
    for (int i = 0; i < P; i++) {
      while (next[i] < nops[i]) {
        Op *o = &ops[i][next[i]];
        int mb = o->mb, k = o->chunk * P + i;
        double dep = 0;
        if (o->fwd && k > 0) dep = fend[((k - 1) * m) + mb];
        if (!o->fwd && !o->w) dep = k < K - 1 ? bend[((k + 1) * m) + mb] : fend[(k * m) + mb];
        if (o->w) dep = bend[k * m + mb];
        if (dep < 0) break;
        o->start = free_at[i] > dep ? free_at[i] : dep;
        o->end = o->start + (o->fwd ? cf[k] : o->w ? cw[k] : cb[k]);
        if (!o->w) (o->fwd ? fend : bend)[k * m + mb] = o->end;
        free_at[i] = o->end;
        if (o->end > span) span = o->end;
        next[i]++, done++, progress++;
      }
    }
    if (!progress) break;
  }
  free(next);
  free(free_at);
  return span;
}

static void svg_text(FILE *f, double x, double y, const char *anchor, int size, const char *s) {
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%d\" text-anchor=\"%s\">", x, y, size, anchor);
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", f);
    else if (*s == '>') fputs("&gt;", f);
    else if (*s == '&') fputs("&amp;", f);
    else fputc(*s, f);
  }
  fputs("</text>\n", f);
}

static void svg_timeline(FILE *f, const Plan *p, Op **ops, const int *nops, double span, double y0, double w) {
  const char *fc[4] = {"#4e79a7", "#76a5d4", "#2c5d8a", "#9cc3e6"},
             *bc[4] = {"#59a14f", "#8cd17d", "#3d7a35", "#b6e3ab"},
             *wc[4] = {"#edc948", "#f1d77a", "#c9a92e", "#f6e6a8"};
  char buf[64];
  for (int i = 0; i < p->ch.pp; i++) {
    double y = y0 + i * 22;
    snprintf(buf, sizeof buf, "stage %d", i);
    svg_text(f, 75, y + 14, "end", 11, buf);
    for (int k = 0; k < nops[i]; k++) {
      const Op *o = &ops[i][k];
      double x = 80 + w * o->start / span, ww = w * (o->end - o->start) / span;
      fprintf(
          f,
          "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"18\" fill=\"%s\"><title>%s micro-batch %d chunk %d: %.4g-%.4g s</title></rect>\n",
          x, y, ww > 0.3 ? ww : 0.3,
          (o->fwd ? fc
           : o->w ? wc
                  : bc)[o->chunk % 4],
          o->fwd                   ? "forward"
          : o->w                   ? "weight gradients (W)"
          : p->ch.sched == PS_ZBH1 ? "input gradients (B)"
                                   : "backward",
          o->mb, o->chunk, o->start, o->end);
      if (ww > 14) {
        snprintf(buf, sizeof buf, "%d", o->mb);
        fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"9\" fill=\"white\" text-anchor=\"middle\">%s</text>\n",
                x + ww / 2, y + 13, buf);
      }
    }
  }
}

static void svg_memory(FILE *f, const PlanResult *r, double y0, double w) {
  const Plan *p = &r->best;
  const char *names[5] = {"weights", "gradients", "optimizer", "activations", "buffers"};
  const char *col[5] = {"#e15759", "#f28e2b", "#edc948", "#4e79a7", "#bab0ac"};
  double cap = r->cl->dev.memory, scale = w / cap;
  char buf[128];
  for (int i = 0; i < p->ch.pp; i++) {
    const StageCost *s = &p->stage[i];
    double v[5] = {s->weights, s->grads, s->optimizer, s->activations, s->buffers}, x = 80, y = y0 + i * 22;
    snprintf(buf, sizeof buf, "stage %d", i);
    svg_text(f, 75, y + 14, "end", 11, buf);
    for (int k = 0; k < 5; k++) {
      fprintf(
          f,
          "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"18\" fill=\"%s\"><title>%s: %.2f GiB</title></rect>\n",
          x, y, v[k] * scale, col[k], names[k], v[k] / GIB);
      x += v[k] * scale;
    }
    snprintf(buf, sizeof buf, "%.1f GiB", s->total / GIB);
    svg_text(f, x + 4, y + 14, "start", 10, buf);
  }
  double ux = 80 + r->usable * scale, h = p->ch.pp * 22;
  fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\" stroke-dasharray=\"4 3\"/>\n", ux,
          y0 - 4, ux, y0 + h);
  snprintf(buf, sizeof buf, "usable %.1f GiB", r->usable / GIB);
  svg_text(f, ux, y0 - 6, "middle", 10, buf);
  for (int k = 0; k < 5; k++) {
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/>\n", 80 + k * 120.0, y0 + h + 8,
            col[k]);
    svg_text(f, 94 + k * 120.0, y0 + h + 17, "start", 10, names[k]);
  }
}

/* Memory of each stage over the step: model states, plus the activations of the
 * micro-batches between their forward and their backward. */
static void svg_memory_time(FILE *f, const PlanResult *r, Op **ops, const int *nops, const double *cs, double span,
                            double y0, double w, double h) {
  const Plan *p = &r->best;
  const char *col[8] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#9c755f"};
  double top = 0;
  char buf[96];
  for (int i = 0; i < p->ch.pp; i++)
    if (p->stage[i].total > top) top = p->stage[i].total;
  top = top > 0 ? 1.15 * top : 1;
  double scale = h / top;
  fprintf(f, "<rect x=\"80\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#999\"/>\n", y0, w, h);
  snprintf(buf, sizeof buf, "%.2f GiB", top / GIB);
  svg_text(f, 76, y0 + 8, "end", 10, buf);
  svg_text(f, 76, y0 + h, "end", 10, "0");
  if (r->usable <= top) {
    double uy = y0 + h - r->usable * scale;
    fprintf(f, "<line x1=\"80\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\" stroke-dasharray=\"4 3\"/>\n", uy,
            80 + w, uy);
    snprintf(buf, sizeof buf, "usable %.1f GiB", r->usable / GIB);
    svg_text(f, 84, uy - 3, "start", 10, buf);
  }
  for (int i = 0; i < p->ch.pp; i++) {
    const StageCost *st = &p->stage[i];
    double base = st->weights + st->grads + st->optimizer, held = 0, x = 80;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.2\" points=\"%.1f,%.1f", col[i % 8], x,
            y0 + h - base * scale);
    /* a forward allocates at its start, a backward (ZB-H1: its W) frees at its end */
    for (int k = 0; k < nops[i]; k++) {
      const Op *o = &ops[i][k];
      if (!o->fwd && !o->w && p->ch.sched == PS_ZBH1) continue;
      double t = o->fwd ? o->start : o->end, dv = cs[o->chunk * p->ch.pp + i] * (o->fwd ? 1 : -1);
      double xx = 80 + w * t / span;
      fprintf(f, " %.1f,%.1f", xx, y0 + h - (base + held) * scale);
      held += dv;
      fprintf(f, " %.1f,%.1f", xx, y0 + h - (base + held) * scale);
    }
    fprintf(f, "\"><title>stage %d</title></polyline>\n", i);
  }
}

void plan_dump_svg(FILE *f, const PlanResult *r) {
  const Plan *p = &r->best;
  int P = p->ch.pp, n = pipe_actions(p->ch.v, p->ch.m, p->ch.sched);
  Op **ops = calloc(P, sizeof *ops);
  int *nops = calloc(P, sizeof(int));
  double *fend = calloc((size_t)P * p->ch.v * p->ch.m, sizeof(double)),
         *bend = calloc((size_t)P * p->ch.v * p->ch.m, sizeof(double));
  for (int i = 0; i < P; i++) {
    ops[i] = calloc(n + 1, sizeof(Op));
    nops[i] = stage_order(p, i, ops[i]);
  }
  int K = P * p->ch.v;
  double *cf = calloc(4 * (size_t)K, sizeof(double)), *cb = cf + K, *cw = cb + K, *cs = cw + K;
  for (int k = 0; k < K; k++) chunk_times(r, p, k, &cf[k], &cb[k], &cw[k], &cs[k]);
  double span = simulate(p, ops, nops, cf, cb, cw, fend, bend), w = 1100;
  if (span <= 0) span = 1;
  double y_mem = 70 + P * 22 + 50, y_time = y_mem + P * 22 + 70, height = y_time + 180;
  char buf[384], sched[48] = "";
  if (p->ch.v > 1) snprintf(sched, sizeof sched, " with %d chunks per stage", p->ch.v);
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  fprintf(
      f,
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n",
      w + 160, height, w + 160, height);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  snprintf(buf, sizeof buf, "%s on %s: dp %d x tp %d x pp %d, %d micro-batch%s of %d, %s%s, ZeRO-%d, recompute %s",
           r->g->name, r->cl->name, p->ch.dp, p->ch.tp, P, p->ch.m, p->ch.m == 1 ? "" : "es", p->ch.mbs,
           schedule_names[p->ch.sched], sched, p->ch.zero, recompute_names[p->ch.rc]);
  svg_text(f, 10, 20, "start", 14, buf);
  snprintf(buf, sizeof buf,
           "pipeline timeline of one step (%.4g s as simulated pass by pass; the cost model predicts %.4g s "
           "including data-parallel communication and the optimizer): forward blue, backward green%s",
           span, p->pr.step, p->ch.sched == PS_ZBH1 ? " (input gradients B), weight gradients W yellow" : "");
  svg_text(f, 10, 40, "start", 11, buf);
  svg_timeline(f, p, ops, nops, span, 60, w);
  svg_text(f, 10, y_mem - 24, "start", 11, "memory per device by stage, at its peak (of the device's capacity)");
  svg_memory(f, r, y_mem, w);
  svg_text(f, 10, y_time - 12, "start", 11,
           "memory per device over the step, one line per stage (model states and the activations held)");
  svg_memory_time(f, r, ops, nops, cs, span, y_time, w, 150);
  free(cf);
  fprintf(f, "</svg>\n");
  for (int i = 0; i < P; i++) free(ops[i]);
  free(ops), free(nops), free(fend), free(bend);
}

/* ---- reading a plan file ------------------------------------------------------------- */

typedef struct PReader {
  const char *path;
  char err[320];
} PReader;

static void pr_fail(PReader *r, const char *fmt, const char *a, const char *b) {
  if (!r->err[0]) snprintf(r->err, sizeof r->err, fmt, r->path, a, b);
}

/* An integer in [lo, hi] at key of obj, or keep *dst when absent. */
static void read_int(PReader *r, const cJSON *obj, const char *key, const char *name, int lo, int hi, int *dst) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return;
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
    char range[64];
    snprintf(range, sizeof range, "an integer from %d to %d", lo, hi);
    pr_fail(r, "%s: %s must be %s", name, range);
    return;
  }
  *dst = (int)v->valuedouble;
}

static void read_name(PReader *r, const cJSON *obj, const char *key, const char *const *names, int n, int *dst) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!v) return;
  for (int i = 0; i < n && cJSON_IsString(v); i++)
    if (!strcmp(v->valuestring, names[i])) {
      *dst = i;
      return;
    }
  char list[128] = "";
  for (int i = 0; i < n; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
  pr_fail(r, "%s: %s must be one of %s", key, list);
}

static int find_segment(const PlanModel *pm, const char *name) {
  for (int k = 0; k < pm->nseg; k++) {
    const Segment *s = &pm->seg[k];
    const char *n = s->kind == SEG_LAYER    ? pm->g->layers[s->layer].name
                    : s->kind == SEG_BEFORE ? "(before layers)"
                                            : "(after layers)";
    if (!strcmp(n, name)) return k;
  }
  return -1;
}

static void read_sharding_ops(PReader *r, Arena *a, const PlanModel *pm, int seg, const cJSON *ops, PlanForce *f) {
  const Segment *s = &pm->seg[seg];
  for (const cJSON *op = ops ? ops->child : NULL; op; op = op->next) {
    int idx = -1;
    read_int(r, op, "index", "sharding[].ops[].index", 0, s->nops - 1, &idx);
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(op, "strategy"),
                *kind = cJSON_GetObjectItemCaseSensitive(op, "op");
    if (idx < 0 || !cJSON_IsString(st)) {
      pr_fail(r, "%s: each of sharding[].ops needs an index and a strategy%s%s", "", "");
      return;
    }
    const Node *n = pm->g->nodes[s->ops[idx]];
    if (kind && (!cJSON_IsString(kind) || strcmp(kind->valuestring, op_info(n->op)->name))) {
      pr_fail(r, "%s: sharding names op %s where the model has %s", cJSON_IsString(kind) ? kind->valuestring : "?",
              op_info(n->op)->name);
      return;
    }
    /* with the placements the plan was dumped with, the strategy is exactly that one */
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(op, "output"),
                *in = cJSON_GetObjectItemCaseSensitive(op, "inputs");
    if (cJSON_IsString(out) && cJSON_IsArray(in) && cJSON_GetArraySize(in) == n->nin) {
      size_t len = strlen(st->valuestring) + strlen(out->valuestring) + 3;
      for (const cJSON *e = in->child; e; e = e->next) len += (cJSON_IsString(e) ? strlen(e->valuestring) : 0) + 1;
      char *key = arena_alloc(a, len + 1);
      int k = snprintf(key, len + 1, "%s %s ", st->valuestring, out->valuestring);
      for (const cJSON *e = in->child; e; e = e->next)
        k +=
            snprintf(key + k, len + 1 - k, "%s%s", e == in->child ? "" : ",", cJSON_IsString(e) ? e->valuestring : "?");
      f->op_strategy[n->id] = key;
    } else {
      f->op_strategy[n->id] = arena_strdup(a, st->valuestring);
    }
  }
}

static void read_sharding(PReader *r, Arena *a, const Graph *g, const cJSON *sh, PlanForce *f) {
  if (!cJSON_IsArray(sh)) {
    pr_fail(r, "%s: sharding must be an array%s%s", "", "");
    return;
  }
  const PlanModel *pm = plan_model_new(a, g, NULL);
  f->op_strategy = arena_array(a, g->n, sizeof(char *));
  for (const cJSON *grp = sh->child; grp; grp = grp->next) {
    const cJSON *segs = cJSON_GetObjectItemCaseSensitive(grp, "segments"),
                *ops = cJSON_GetObjectItemCaseSensitive(grp, "ops");
    if (!cJSON_IsArray(segs) || (ops && !cJSON_IsArray(ops))) {
      pr_fail(r, "%s: each sharding entry needs \"segments\" (names) and \"ops\"%s%s", "", "");
      return;
    }
    for (const cJSON *sn = segs->child; sn; sn = sn->next) {
      int k = cJSON_IsString(sn) ? find_segment(pm, sn->valuestring) : -1;
      if (k < 0) {
        pr_fail(r, "%s: sharding names segment '%s', which the model does not have%s",
                cJSON_IsString(sn) ? sn->valuestring : "?", "");
        return;
      }
      read_sharding_ops(r, a, pm, k, ops, f);
    }
  }
}

static void read_plan(PReader *r, Arena *a, const Graph *g, const cJSON *root, PlanForce *f) {
  static const char *const keys[] = {
      "schema",      "model",           "parameters",   "cluster",   "precision", "mesh",
      "zero_stage",  "microbatch_size", "microbatches", "recompute", "schedule",  "virtual_stages",
      "attention",   "offload",         "predicted",    "memory",    "stages",    "sharding",
      "collectives", "runners_up",      "search",       NULL};
  if (!cJSON_IsObject(root)) {
    pr_fail(r, "%s: a plan must be a JSON object%s%s", "", "");
    return;
  }
  for (const cJSON *it = root->child; it; it = it->next) {
    int k = 0;
    while (keys[k] && strcmp(keys[k], it->string)) k++;
    if (!keys[k]) pr_fail(r, "%s: unknown field '%s'%s", it->string, "");
  }
  const cJSON *mesh = cJSON_GetObjectItemCaseSensitive(root, "mesh");
  if (mesh && !cJSON_IsObject(mesh)) pr_fail(r, "%s: mesh must be an object with dp, tp and pp%s%s", "", "");
  else if (mesh) {
    read_int(r, mesh, "dp", "mesh.dp", 1, 1 << 24, &f->dp);
    read_int(r, mesh, "tp", "mesh.tp", 1, 1 << 24, &f->tp);
    read_int(r, mesh, "pp", "mesh.pp", 1, 1 << 24, &f->pp);
  }
  read_int(r, root, "zero_stage", "zero_stage", 0, 3, &f->zero);
  read_int(r, root, "microbatch_size", "microbatch_size", 1, 1 << 24, &f->mbs);
  read_int(r, root, "virtual_stages", "virtual_stages", 1, 64, &f->v);
  read_name(r, root, "recompute", recompute_names, RC_COUNT, &f->rc);
  read_name(r, root, "schedule", schedule_names, PS_KINDS, &f->schedule);
  read_name(r, root, "attention", attn_kernel_names, 2, &f->attn);
  read_name(r, root, "offload", offload_names, OFFLOAD_KINDS, &f->offload);
  int prec = -1;
  read_name(r, root, "precision", precision_names, 4, &prec);
  if (prec >= 0) f->precision = precision_dtypes[prec];
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(root, "sharding");
  if (sh && !r->err[0]) read_sharding(r, a, g, sh, f);
}

void plan_read_json(Arena *a, const char *path, const Graph *g, PlanForce *f) {
  FILE *fp = fopen(path, "rb");
  if (!fp) error_plain("cannot read plan file %s", path);
  char *text = NULL;
  size_t len = 0, cap = 0, got;
  char buf[8192];
  while ((got = fread(buf, 1, sizeof buf, fp)) > 0) {
    if (len + got + 1 > cap) {
      cap = (len + got + 1) * 2;
      char *t = realloc(text, cap);
      if (!t) {
        free(text);
        fclose(fp);
        error_plain("%s: out of memory", path);
      }
      text = t;
    }
    memcpy(text + len, buf, got);
    len += got;
  }
  fclose(fp);
  cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
  free(text);
  if (!root) error_plain("%s: not valid JSON", path);
  PReader r = {.path = path};
  read_plan(&r, a, g, root, f);
  cJSON_Delete(root);
  if (r.err[0]) error_plain("%s", r.err);
  if (f->v > 1 && f->schedule < 0) f->schedule = PS_INTERLEAVED;
}
