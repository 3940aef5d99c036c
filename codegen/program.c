/* Writing the programs of one compilation in the program format (program/program.h):
 * the model's record and each stage's, their parameters, inputs, offload chunks, the
 * shared kernel codes and bindings, and every list's instructions as they are. */
#include <stdlib.h>
#include <string.h>
#include "codegen/compose.h"
#include "codegen/cuda.h"
#include "codegen/lower.h"
#include "codegen/offload.h"
#include "codegen/zero.h"

typedef struct W {
  ProgBuild *b;
  Program *const *ps;
  int n;
  const char **gnames; /* [ngparams] the model's parameters, each once, in stage order */
  int ngparams;
} W;

static const ProgInit init_of[] = {
    [INIT_NONE] = PROG_INIT_NORMAL,   [INIT_ZEROS] = PROG_INIT_ZEROS,     [INIT_ONES] = PROG_INIT_ONES,
    [INIT_NORMAL] = PROG_INIT_NORMAL, [INIT_UNIFORM] = PROG_INIT_UNIFORM, [INIT_CONSTANT] = PROG_INIT_CONSTANT};

static int64_t ints(W *w, const int64_t *v, int64_t n) { return prog_build_add(w->b, PROG_SEC_INTS, v, n); }

/* The model's values every record repeats: its name, sizes, mesh, training settings and
 * architecture. */
static ProgStage model_values(W *w) {
  const Program *p = w->ps[0];
  const TrainSpec *t = &p->g->train;
  ProgStage s = {.model = prog_build_str(w->b, p->g->name),
                 .batch = p->batch,
                 .seq = p->seq,
                 .vocab = p->vocab,
                 .microbatches = p->microbatches,
                 .dp = p->dp,
                 .tp = p->tp,
                 .pp = p->pp,
                 .zero_stage = p->zero_stage,
                 .optimizer = (ProgOptimizer)t->opt, /* the same order */
                 .trust_ends = -1,
                 .schedule = t->schedule == SCHED_COSINE ? PROG_SCHED_COSINE : PROG_SCHED_CONSTANT,
                 .lr = t->lr,
                 .beta1 = t->beta1,
                 .beta2 = t->beta2,
                 .eps = t->eps,
                 .weight_decay = t->weight_decay,
                 .momentum = t->momentum,
                 .clip = t->clip,
                 .min_lr = t->min_lr,
                 .warmup = t->warmup,
                 .loss_scaling = t->loss_scaling, /* PyTorch GradScaler's defaults */
                 .scale_init = 65536,
                 .scale_growth = 2,
                 .scale_backoff = 0.5,
                 .scale_interval = 2000,
                 .logits_offset = -1,
                 .tokens = -1,
                 .targets = -1,
                 .no_sample = -1,
                 .plan_step_s = p->plan_step,
                 .plan_cluster = p->plan_cluster ? prog_build_str(w->b, p->plan_cluster) : -1};
  for (int k = 0; k < PROG_NLISTS; k++) s.list[k] = -1;
  const GraphArch *a = p->arch;
  if (a)
    s.arch = 1, s.heads = a->heads, s.kv_heads = a->kv_heads, s.window = a->window, s.causal = a->causal,
    s.attention_scale = a->scaled, s.norm = (ProgArchKind)a->norm, s.norm_eps = a->norm_eps,
    s.activation = (ProgArchKind)a->act, s.rope_theta = a->rope_theta;
  for (int k = 0; a && k < 4; k++) s.rope_scaling[k] = a->rope_scaling[k];
  for (int i = 0; i < w->n; i++) /* fp8: the model's states (a pipeline's: every stage's) */
    if (w->ps[i]->fp8.rows)
      s.fp8_total = w->ps[i]->fp8.runs ? w->ps[i]->fp8.total : w->ps[i]->fp8.rows, s.fp8_width = w->ps[i]->fp8.width;
  return s;
}

/* A parameter of stage program p (global: its shape over the whole tp group, at a packed
 * offset). */
static ProgParam param_of(W *w, const Program *p, const PParam *q, bool global, int64_t offset) {
  const Node *n = q->node;
  ProgParam r = {.name = prog_build_str(w->b, n->name),
                 .ndim = n->shape.ndim,
                 .numel = global ? shape_numel(&n->shape) : q->numel,
                 .start = global ? 0 : q->start,
                 .offset = global ? offset : q->offset,
                 .decay = q->decay,
                 .init = init_of[n->init.kind],
                 .a = n->init.kind == INIT_NONE ? 0.02 : n->init.a,
                 .b = n->init.b,
                 .tp_dim = n->split - 1,
                 .tp_blocks = n->split ? n->split_blocks : 1,
                 .owner = !global && p->zero_stage > 0 ? q->owner : -1};
  for (int d = 0; d < n->shape.ndim; d++) r.shape[d] = n->shape.d[d];
  if (global && n->split) r.shape[n->split - 1] *= p->tp, r.numel *= p->tp;
  return r;
}

static int global_index(const W *w, const char *name) {
  for (int i = 0; i < w->ngparams; i++)
    if (!strcmp(w->gnames[i], name)) return i;
  return -1;
}

/* The model's record: every parameter once (stage order), packed, its own tiers. */
static void write_model(W *w) {
  ProgStage s = model_values(w);
  s.stage = -1, s.slots = 1;
  int cap = 0;
  for (int i = 0; i < w->n; i++) cap += w->ps[i]->nparams;
  w->gnames = calloc((size_t)cap + 1, sizeof *w->gnames);
  if (!w->gnames) diag_internal(__FILE__, __LINE__, "out of memory writing the program");
  s.param0 = prog_build_count(w->b, PROG_SEC_PARAMS);
  for (int i = 0; i < w->n; i++)
    for (int k = 0; k < w->ps[i]->nparams; k++) {
      const PParam *q = &w->ps[i]->params[k];
      if (global_index(w, q->node->name) >= 0) continue;
      ProgParam r = param_of(w, w->ps[i], q, true, s.param_elems * 4);
      r.global = w->ngparams;
      w->gnames[w->ngparams++] = q->node->name;
      s.param_elems += r.numel;
      prog_build_add(w->b, PROG_SEC_PARAMS, &r, 1);
    }
  s.nparams = w->ngparams;
  int64_t bytes = s.param_elems * 4;
  s.tiers[TIER_PARAMS] = s.tiers[TIER_GRADS] = s.opt_v_offset = bytes;
  s.tiers[TIER_OPT] = prog_moments(&s) * bytes;
  prog_build_add(w->b, PROG_SEC_STAGES, &s, 1);
}

static ProgInput input_of(W *w, const PInput *in) {
  static const ProgRole roles[] = {
      [PIN_TOKENS] = PROG_ROLE_TOKENS, [PIN_TARGETS] = PROG_ROLE_TARGETS, [PIN_OTHER] = PROG_ROLE_DATA};
  const Node *n = in->node;
  ProgInput r = {.name = prog_build_str(w->b, n->name),
                 .role = roles[in->role],
                 .is_f32 = n->dtype != DT_I32,
                 .ndim = n->shape.ndim,
                 .row_elems = 1,
                 .offset = in->offset,
                 .ranged = in->hi >= 0,
                 .hi = in->hi,
                 .has_ignore = in->has_ignore,
                 .ignore = in->ignore};
  for (int d = 0; d < n->shape.ndim; d++) r.shape[d] = n->shape.d[d], r.row_elems *= d ? n->shape.d[d] : 1;
  return r;
}

static void write_params_inputs(W *w, const Program *p, ProgStage *s) {
  s->param0 = prog_build_count(w->b, PROG_SEC_PARAMS), s->nparams = p->nparams;
  for (int k = 0; k < p->nparams; k++) {
    ProgParam r = param_of(w, p, &p->params[k], false, 0);
    r.global = global_index(w, p->params[k].node->name);
    s->param_elems += r.numel;
    prog_build_add(w->b, PROG_SEC_PARAMS, &r, 1);
  }
  s->input0 = prog_build_count(w->b, PROG_SEC_INPUTS), s->ninputs = p->ninputs;
  for (int i = 0; i < p->ninputs; i++) {
    ProgInput r = input_of(w, &p->inputs[i]);
    if (r.role == PROG_ROLE_TOKENS) s->tokens = i;
    if (r.role == PROG_ROLE_TARGETS) s->targets = i;
    prog_build_add(w->b, PROG_SEC_INPUTS, &r, 1);
  }
}

/* Offload's chunks and its predictions: device peak, then each rank's host peak, NVMe
 * peak and bytes moved. */
/* Whether a part lives on NVMe or a move takes one there; the most WORK bytes one on_host
 * kernel of the update and the norm passes (a host running them apart from the device
 * copies them). */
static void offload_needs(const Program *p, ProgStage *s) {
  const OffloadPlan *op = p->offload;
  for (int c = 0; c < op->nchunks; c++)
    for (int k = 0; k < PART_COUNT; k++) s->nvme |= op->chunk[c].home[k] == LOC_NVME;
  const PSeq *lists[3] = {&p->step, &p->gradnorm, &p->update};
  for (int l = 0; l < 3; l++)
    for (int i = 0; i < lists[l]->n; i++) {
      const IsaInstr *in = &lists[l]->v[i];
      bool mv = in->op == ISA_MOVE || in->op == ISA_DROP;
      s->nvme |= mv && (in->move.from == LOC_NVME || (in->op == ISA_MOVE && in->move.to == LOC_NVME));
      if (in->op != ISA_KERNEL || !in->kernel.on_host) continue;
      const Kernel *k = p->kernels[in->kernel.id];
      int64_t n = 0;
      for (int b = 0; b < k->nbufs; b++)
        n += k->bufs[b].tier == TIER_WORK ? k->bufs[b].numel * kbuf_elem_bytes(&k->bufs[b]) : 0;
      s->host_work = n > s->host_work ? n : s->host_work;
    }
}

static void write_offload(W *w, const Program *p, ProgStage *s) {
  const OffloadPlan *op = p->offload;
  s->offload = 1, s->capacity = op->capacity;
  offload_needs(p, s);
  s->chunk0 = prog_build_count(w->b, PROG_SEC_CHUNKS), s->nchunks = op->nchunks;
  for (int c = 0; c < op->nchunks; c++) {
    const OChunk *ch = &op->chunk[c];
    ProgChunk r = {.lo = ch->lo, .hi = ch->hi, .start = ch->start, .end = ch->end, .owner = ch->owner};
    if (ch->hi == p->nparams && r.end > p->tiers[TIER_PARAMS]) r.end = p->tiers[TIER_PARAMS];
    for (int k = 0; k < PART_COUNT; k++) r.home[k] = ch->home[k];
    prog_build_add(w->b, PROG_SEC_CHUNKS, &r, 1);
  }
  s->npredicted = op->ranks > 1 ? op->ranks : 1;
  s->predicted = ints(w, &op->device_peak, 1);
  for (int r = 0; r < s->npredicted; r++) {
    int64_t v[3] = {op->host_peak, op->nvme_peak, op->transfer_bytes};
    if (op->ranks > 1) v[0] = op->rank_host_peak[r], v[1] = op->rank_nvme_peak[r], v[2] = op->rank_transfer[r];
    ints(w, v, 3);
  }
}

/* The stages this stage's lists send to or receive from, and the stage groups. */
static void write_peers_groups(W *w, const Program *p, ProgStage *s) {
  int64_t *peers = calloc((size_t)p->pp + 1, sizeof *peers);
  bool *seen = calloc((size_t)p->pp + 1, sizeof *seen);
  if (!peers || !seen) diag_internal(__FILE__, __LINE__, "out of memory writing the program");
  for (int l = 0; l < p->nlists; l++)
    for (int i = 0; i < p->lists[l].seq.n; i++) {
      const IsaInstr *in = &p->lists[l].seq.v[i];
      if ((in->op == ISA_SEND || in->op == ISA_RECV) && !seen[in->p2p.peer])
        seen[in->p2p.peer] = true, peers[s->npeers++] = in->p2p.peer;
    }
  s->peers = ints(w, peers, s->npeers);
  free(peers), free(seen);
  s->groups = prog_build_count(w->b, PROG_SEC_INTS), s->ngroups = p->nstage_groups;
  for (int g = 0; g < p->nstage_groups; g++) {
    int64_t n = p->stage_groups[g].n;
    ints(w, &n, 1);
    for (int i = 0; i < n; i++) {
      int64_t st = p->stage_groups[g].stages[i];
      ints(w, &st, 1);
    }
  }
}

/* Whether list l sends, itself or in a list it calls. */
static bool list_sends(const Program *p, int l) {
  for (int i = 0; i < p->lists[l].seq.n; i++) {
    const IsaInstr *in = &p->lists[l].seq.v[i];
    if (in->op == ISA_SEND || (in->op == ISA_CALL && in->call.list != l && list_sends(p, in->call.list))) return true;
  }
  return false;
}

/* Every list of p, calls pointing at the lists' places in the program; before the
 * lists are made (pass "lists"), the passes' sequences under their own names, for
 * --dump-after. */
static void write_list(W *w, const char *name, const PSeq *q, int64_t base, bool sends) {
  ProgList r = {prog_build_str(w->b, name), prog_build_count(w->b, PROG_SEC_INSTRS), q->n, sends};
  int64_t at = prog_build_add(w->b, PROG_SEC_INSTRS, q->v, q->n);
  for (int i = 0; i < q->n; i++) {
    IsaInstr *in = prog_build_at(w->b, PROG_SEC_INSTRS, at + i);
    if (in->op == ISA_CALL) in->call.list += (int32_t)base;
  }
  prog_build_add(w->b, PROG_SEC_LISTS, &r, 1);
}

/* Every list of p, calls pointing at the lists' places in the program; before the
 * lists are made (pass "lists"), first the passes' sequences under their own names,
 * for --dump-after. */
static void write_lists(W *w, const Program *p, ProgStage *s) {
  const struct {
    const char *name;
    const PSeq *seq;
  } seqs[] = {{"step", &p->step},     {"sync", &p->sync},       {"gradnorm", &p->gradnorm},
              {"update", &p->update}, {"forward", &p->forward}, {"fp8.tail", &p->fp8.tail}};
  int nseqs = p->named[PROG_LIST_TRAIN] < 0 ? (int)(sizeof seqs / sizeof *seqs) : 0;
  int64_t base = prog_build_count(w->b, PROG_SEC_LISTS) + nseqs;
  for (int l = 0; l < nseqs; l++) write_list(w, seqs[l].name, seqs[l].seq, base, false);
  for (int l = 0; l < p->nlists; l++) write_list(w, p->lists[l].name, &p->lists[l].seq, base, list_sends(p, l));
  for (int k = 0; k < PROG_NLISTS; k++) s->list[k] = p->named[k] >= 0 ? base + p->named[k] : -1;
}

/* Why `train --sample` (the forward list on one rank, from a language model's tokens
 * alone) cannot run p; NULL when it can. */
static const char *no_sample(const Program *p, const ProgStage *s) {
  if (p->tp > 1 || p->pp > 1)
    return "--sample: sampling runs `forward` on one rank, and this program is split over tensor or pipeline "
           "ranks; it needs a one-stage, unsplit program: train with --save FILE, then sample with the model "
           "compiled for one rank (`colossalc MODEL -o train1`, then `./train1 --init-from FILE --steps 0 "
           "--sample N`)";
  if (p->offload && p->zero_stage == 3)
    return "--sample: this program keeps each rank's share of the parameters at its homes (ZeRO-3 with "
           "offload), and `forward` needs them all on one device; sample from the saved parameters with a "
           "program compiled without offload";
  for (int i = 0; i < p->ninputs; i++)
    if (p->inputs[i].role == PIN_OTHER)
      return "--sample: sampling feeds `forward` the tokens of a language model alone, and this program reads "
             "inputs that are not them nor their targets";
  if (s->tokens < 0) return "--sample: this program reads no tokens to sample from";
  if (p->logits_offset < 0 || s->list[PROG_LIST_FORWARD] < 0)
    return "--sample: this program computes the classifier and its loss a chunk of rows at a time (colossalc "
           "--classifier fused) and never holds the logits `forward` samples from; compile with --classifier "
           "materialized to sample";
  return NULL;
}

/* What the runtime must not decide: whether any collective overlaps, the tiers held in
 * part (ZeRO's owned shards from stage 1, offload's homes), sampling. */
static void write_run_facts(W *w, const Program *p, ProgStage *s) {
  for (int l = 0; l < p->nlists && !s->overlaps; l++)
    for (int i = 0; i < p->lists[l].seq.n; i++) s->overlaps |= p->lists[l].seq.v[i].overlap;
  s->reserved = prog_reserved_tiers(p->zero_stage, p->offload != NULL);
  const char *why = no_sample(p, s);
  s->no_sample = why ? prog_build_str(w->b, why) : -1;
}

static void write_stage(W *w, const Program *p) {
  ProgStage s = model_values(w);
  s.stage = p->stage;
  memcpy(s.tiers, p->tiers, sizeof s.tiers);
  s.opt_v_offset = p->opt_v_offset, s.slots = p->slots, s.work_shared = p->work_shared;
  s.staging = p->staging, s.norm_parts = p->gradnorm_parts;
  s.logits_offset = p->logits_offset, s.logits_dtype = p->logits_dtype, s.flops_per_step = p->flops_per_step;
  s.plan_compute_s = p->plan_compute;
  write_params_inputs(w, p, &s);
  if (p->trust_parts) { /* LAMB: the parameters' slots of "trust" */
    s.trust_ends = prog_build_count(w->b, PROG_SEC_INTS);
    for (int k = 0; k < p->nparams; k++) {
      int64_t end = lower_trust_slot(p, k + 1);
      ints(w, &end, 1);
    }
  }
  if (p->fp8.rows) {
    s.fp8_offset = p->fp8.state, s.fp8_rows = p->fp8.rows, s.fp8_runs = prog_build_count(w->b, PROG_SEC_INTS);
    for (int i = 0; i < p->fp8.nruns; i++) ints(w, p->fp8.runs[i], 3), s.fp8_nruns++;
    if (!p->fp8.nruns) ints(w, (int64_t[]){0, 0, p->fp8.rows}, 3), s.fp8_nruns = 1; /* the model's rows, all */
  }
  if (p->offload) write_offload(w, p, &s);
  else { /* the device memory of a step on each dp rank (codegen/zero.h) */ int n = p->zero_stage > 0 ? (int)p->dp : 1;
    int64_t *v = arena_array(p->arena, n, sizeof *v);
    zero_predict_memory(p, v, n);
    s.memory = ints(w, v, n), s.nmemory = n;
  }
  write_peers_groups(w, p, &s);
  write_lists(w, p, &s);
  write_run_facts(w, p, &s);
  prog_build_add(w->b, PROG_SEC_STAGES, &s, 1);
}

/* The kernel codes (shared by the stages) and each kernel's code and buffers. */
static void write_kernels(W *w) {
  const Program *p = w->ps[0];
  int ncode = p->code ? p->ncode : p->nkernels; /* before "share": a code each */
  for (int i = 0; i < ncode; i++) {
    const Kernel *k = p->code ? p->code[i] : p->kernels[i];
    ProgCode c = {prog_build_str(w->b, k->name), cuda_kernel_block_size(k),
                  cuda_kernel_grid_size(k, k->par == KP_ROWS ? k->rows : k->cols)};
    prog_build_add(w->b, PROG_SEC_CODES, &c, 1);
  }
  for (int i = 0; i < p->nkernels; i++) {
    const Kernel *k = p->kernels[i];
    ProgKernel r = {p->code ? p->code_of[i] : i, prog_build_count(w->b, PROG_SEC_ARGS), k->nbufs};
    for (int j = 0; j < k->nbufs; j++) {
      const KBuf *b = &k->bufs[j];
      ProgArg a = {b->tier, b->shared, b->offset, b->numel * kbuf_elem_bytes(b)};
      prog_build_add(w->b, PROG_SEC_ARGS, &a, 1);
    }
    prog_build_add(w->b, PROG_SEC_KERNELS, &r, 1);
  }
}

void *program_write(Program *const *ps, int n, int64_t *bytes) {
  W w = {prog_build_new(), ps, n, NULL, 0};
  if (!w.b) diag_internal(__FILE__, __LINE__, "out of memory writing the program");
  write_model(&w);
  for (int i = 0; i < n; i++) write_stage(&w, ps[i]);
  write_kernels(&w);
  free(w.gnames);
  void *blob = prog_build_finish(w.b, bytes);
  if (!blob) diag_internal(__FILE__, __LINE__, "out of memory writing the program");
  return blob;
}
