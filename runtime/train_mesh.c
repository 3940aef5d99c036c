/* train_mesh: mesh coordinates and groups, the global parameter view, tied
 * gradients and the checkpoint gathers (see the header). Point-to-point traffic of
 * the gathers goes over the world Comm (blocking send/recv, tag 0 of its own
 * communicator), tied gradients over groups of their holders, so neither meets the
 * program's pipeline messages.
 */
#include "train_mesh.h"

#include "runtime/fileio.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- groups -------------------------------------------------------------------- */

/* D from the program and the world, or an error naming the mesh. */
static int mesh_size(Mesh *m, const RtProgram *p, int world, char *err, size_t errlen) {
  int64_t tp = p->mesh.tp, pp = p->mesh.pp, d = p->mesh.dp;
  m->tp = (int)tp, m->pp = (int)pp;
  if (tp * pp == 1 && d && d != world)
    return file_set_error(err, errlen,
                          "this program was planned for %" PRId64 " data-parallel ranks: run it "
                          "with mpirun -np %" PRId64 " (it runs on %d)",
                          d, d, world);
  if (d && d * tp * pp != world)
    return file_set_error(err, errlen,
                          "this program was planned for the mesh dp %" PRId64 " x tp %" PRId64 " x pp %" PRId64
                          ": run it with mpirun -np %" PRId64 " (it runs on %d)",
                          d, tp, pp, d * tp * pp, world);
  if (world % (tp * pp) != 0)
    return file_set_error(err, errlen,
                          "this program was planned for the mesh dp any x tp %" PRId64 " x pp %" PRId64
                          ": run it on a multiple of %" PRId64 " ranks (it runs on %d)",
                          tp, pp, tp * pp, world);
  m->dp = (int)(world / (tp * pp));
  return 0;
}

static Comm *mesh_split(Comm *world, int color, int key) {
  Comm *c = world->split(world, color, key);
  if (!c) {
    fflush(stdout);
    fprintf(stderr, "train: out of memory splitting the ranks into groups\n");
    world->abort(world, 1);
  }
  return c;
}

static int mesh_groups(Mesh *m, Comm *world) {
  int r = world->rank, dt = m->dp * m->tp;
  m->pp_rank = r / dt, m->dp_rank = r / m->tp % m->dp, m->tp_rank = r % m->tp;
  if (m->trivial) {
    m->dp_comm = world;
    m->tp_comm = comm_self_new();
    m->pp_comm = comm_self_new();
    return m->tp_comm && m->pp_comm ? 0 : -1;
  }
  m->tp_comm = mesh_split(world, m->pp_rank * m->dp + m->dp_rank, m->tp_rank);
  m->dp_comm = mesh_split(world, m->pp_rank * m->tp + m->tp_rank, m->dp_rank);
  m->pp_comm = mesh_split(world, m->dp_rank * m->tp + m->tp_rank, m->pp_rank);
  return 0;
}

/* ---- the global view ----------------------------------------------------------- */

static int global_add(Mesh *m, const RtProgram *st, const RtParam *q, int s) {
  RtProgram *g = &m->global;
  RtParam *out = &g->params[g->nparams];
  *out = *q;
  if (!(out->name = strdup(q->name))) return -1;
  program_global_shape(st, q, out->shape);
  out->numel = q->numel * (q->tp_dim >= 0 ? m->tp : 1);
  out->offset = g->param_elems * 4;
  g->param_elems += out->numel;
  m->source[g->nparams++] = s;
  return 0;
}

/* global.params and source: each name once, in stage order. */
static int global_params(Mesh *m) {
  int total = 0;
  for (int s = 0; s < m->pp; s++) total += m->stages[s].nparams;
  m->global.params = calloc((size_t)total, sizeof *m->global.params);
  m->source = calloc((size_t)total, sizeof *m->source);
  if (!m->global.params || !m->source) return -1;
  for (int s = 0; s < m->pp; s++)
    for (int i = 0; i < m->stages[s].nparams; i++) {
      const RtParam *q = &m->stages[s].params[i];
      if (!program_find_param(&m->global, q->name) && global_add(m, &m->stages[s], q, s) != 0) return -1;
    }
  return 0;
}

/* local_of, gindex. */
static int global_index(Mesh *m) {
  int gn = m->global.nparams;
  m->local_of = malloc((size_t)m->pp * (size_t)gn * sizeof *m->local_of);
  m->gindex = calloc((size_t)m->prog->nparams + 1, sizeof *m->gindex);
  if (!m->local_of || !m->gindex) return -1;
  for (int g = 0; g < gn; g++) {
    for (int s = 0; s < m->pp; s++) {
      const RtParam *q = program_find_param(&m->stages[s], m->global.params[g].name);
      m->local_of[s * gn + g] = q ? (int)(q - m->stages[s].params) : -1;
      if (q && s == m->pp_rank) m->gindex[q - m->prog->params] = g;
    }
  }
  return 0;
}

static int global_program(Mesh *m) {
  RtProgram *g = &m->global;
  const RtProgram *p = m->prog;
  g->version = p->version, g->batch = p->batch, g->seq = p->seq, g->vocab = p->vocab;
  g->microbatches = p->microbatches, g->train = p->train, g->mesh = p->mesh;
  g->slots = 1;
  if (!(g->model = strdup(p->model)) || (p->arch && !(g->arch = strdup(p->arch))) || global_params(m) != 0 ||
      global_index(m) != 0)
    return -1;
  int64_t bytes = g->param_elems * 4;
  g->tiers[RT_TIER_PARAMS] = g->tiers[RT_TIER_GRADS] = bytes;
  g->opt_v_offset = bytes;
  g->tiers[RT_TIER_OPT] = p->train.optimizer == RT_OPT_ADAMW ? 2 * bytes : bytes;
  return 0;
}

/* The checkpoint gathers' scratch buffer: the largest local parameter. */
static int mesh_scratch(Mesh *m) {
  int64_t most = 1;
  for (int i = 0; i < m->prog->nparams; i++) most = m->prog->params[i].numel > most ? m->prog->params[i].numel : most;
  return (m->scratch = calloc((size_t)most, sizeof *m->scratch)) ? 0 : -1;
}

int mesh_init(Mesh *m, const RtProgram *stages, int nstages, Comm *world, char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  m->world = world, m->stages = stages;
  if (mesh_size(m, &stages[0], world->size, err, errlen) != 0) return -1;
  if (nstages != m->pp)
    return file_set_error(err, errlen, "internal error: %d stage programs for pp %d", nstages, m->pp);
  m->trivial = m->tp == 1 && m->pp == 1;
  if (mesh_groups(m, world) != 0) return file_set_error(err, errlen, "out of memory");
  m->prog = &stages[m->pp_rank];
  if (global_program(m) != 0 || mesh_scratch(m) != 0) return file_set_error(err, errlen, "out of memory");
  return 0;
}

void mesh_free(Mesh *m) {
  for (int k = 0; m->stage_comms && k < m->prog->nstage_groups; k++)
    if (m->stage_comms[k]) m->stage_comms[k]->destroy(m->stage_comms[k]);
  free(m->stage_comms);
  if (m->tp_comm) m->tp_comm->destroy(m->tp_comm);
  if (m->pp_comm) m->pp_comm->destroy(m->pp_comm);
  if (m->dp_comm && m->dp_comm != m->world) m->dp_comm->destroy(m->dp_comm);
  program_free(&m->global);
  free(m->local_of), free(m->gindex), free(m->source), free(m->scratch);
  memset(m, 0, sizeof *m);
}

/* ---- slices -------------------------------------------------------------------- */

void mesh_slice(const Mesh *m, const RtParam *l, float *local, const RtParam *g, float *global, int to_global) {
  if (l->tp_dim < 0) {
    memcpy(to_global ? global : local, to_global ? local : global, (size_t)l->numel * 4);
    return;
  }
  int64_t outer = 1, inner = 1, len = l->shape[l->tp_dim], c = len / l->tp_blocks;
  for (int d = 0; d < l->tp_dim; d++) outer *= l->shape[d];
  for (int d = l->tp_dim + 1; d < l->ndim; d++) inner *= l->shape[d];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t k = 0; k < l->tp_blocks; k++) {
      float *lp = local + (o * len + k * c) * inner;
      float *gp = global + (o * len * m->tp + k * c * m->tp + m->tp_rank * c) * inner;
      memcpy(to_global ? gp : lp, to_global ? lp : gp, (size_t)(c * inner) * 4);
    }
}

void mesh_scatter(const Mesh *m, const char *gparams, const char *gopt, char *params, char *opt,
                  const unsigned char *opt_held) {
  const RtProgram *p = m->prog;
  for (int i = 0; i < p->nparams; i++) {
    const RtParam *l = &p->params[i], *g = &m->global.params[m->gindex[i]];
    mesh_slice(m, l, (float *)(params + l->offset), g, (float *)(gparams + g->offset), 0);
    if (!gopt || (opt_held && !opt_held[i]) || p->tiers[RT_TIER_OPT] == 0) continue;
    mesh_slice(m, l, (float *)(opt + l->offset), g, (float *)(gopt + g->offset), 0);
    if (p->train.optimizer == RT_OPT_ADAMW)
      mesh_slice(m, l, (float *)(opt + p->opt_v_offset + l->offset), g,
                 (float *)(gopt + m->global.opt_v_offset + g->offset), 0);
  }
}

/* One local tensor of stage s, tp rank t (at local offset off of its tier, global
 * offset goff): sent by its holder, received into world rank 0's global buffer. */
static void gather_one(Mesh *m, int s, int t, const RtParam *l, const RtParam *g, const char *base, int64_t off,
                       char *gbase, int64_t goff) {
  Comm *w = m->world;
  int from = s * m->dp * m->tp + t; /* dp rank 0 */
  Mesh view = *m;
  view.tp_rank = t; /* the sender's block positions */
  if (w->rank == from && from == 0) {
    mesh_slice(&view, l, (float *)(base + off), g, (float *)(gbase + goff), 1);
  } else if (w->rank == from) {
    w->send(w, (const float *)(base + off), l->numel, 0);
  } else if (w->rank == 0) {
    w->recv(w, m->scratch, l->numel, from);
    mesh_slice(&view, l, m->scratch, g, (float *)(gbase + goff), 1);
  }
}

void mesh_gather(Mesh *m, char *gparams, char *gopt, const char *params, const char *opt, int opt_too) {
  const RtProgram *G = &m->global;
  if (m->dp_rank != 0) return;
  for (int gi = 0; gi < G->nparams; gi++) {
    int s = m->source[gi];
    const RtProgram *st = &m->stages[s];
    const RtParam *g = &G->params[gi], *l = &st->params[m->local_of[s * G->nparams + gi]];
    int mine = s == m->pp_rank || m->world->rank == 0;
    int nt = l->tp_dim >= 0 ? m->tp : 1;
    for (int t = 0; t < nt && mine; t++) {
      gather_one(m, s, t, l, g, params, l->offset, gparams, g->offset);
      if (!opt_too || st->tiers[RT_TIER_OPT] == 0) continue;
      gather_one(m, s, t, l, g, opt, l->offset, gopt, g->offset);
      if (st->train.optimizer == RT_OPT_ADAMW)
        gather_one(m, s, t, l, g, opt, st->opt_v_offset + l->offset, gopt, G->opt_v_offset + g->offset);
    }
  }
}

/* Stage program st's fp8 states between its layout (rows x width) and the model's
 * (total x width), by its runs: from `from` in one layout into `to` in the other (the
 * model's when to_model). */
static void fp8_place(const RtProgram *st, const float *from, float *to, int to_model) {
  int64_t w = st->fp8.width;
  for (int i = 0; i < st->fp8.nruns; i++) {
    const int64_t *r = st->fp8.runs[i];
    int64_t src = to_model ? r[1] : r[0], dst = to_model ? r[0] : r[1];
    memcpy(to + dst * w, from + src * w, (size_t)(r[2] * w) * sizeof *to);
  }
}

void mesh_fp8_gather(Mesh *m, const float *local, float *model) {
  Comm *w = m->world;
  if (m->dp_rank != 0 || m->tp_rank != 0) return;
  for (int s = 0; s < m->pp; s++) {
    const RtProgram *st = &m->stages[s];
    if (w->rank == 0 && s == m->pp_rank) fp8_place(st, local, model, 1);
    else if (w->rank == 0 || s == m->pp_rank) /* run by run, straight into place */
      for (int i = 0; i < st->fp8.nruns; i++) {
        const int64_t *r = st->fp8.runs[i], n = r[2] * st->fp8.width;
        if (w->rank == 0) w->recv(w, model + r[0] * st->fp8.width, n, s * m->dp * m->tp); /* its dp 0, tp 0 */
        else w->send(w, local + r[1] * st->fp8.width, n, 0);
      }
  }
}

void mesh_fp8_scatter(const Mesh *m, const float *model, float *local) { fp8_place(m->prog, model, local, 0); }

/* ---- groups of stages ---------------------------------------------------------- */

/* The program's stage groups (the holders of tied parameters), split from the pp
 * group in the program's order: every stage makes every split, and keeps those it is
 * in. */
static int mesh_stage_groups(Mesh *m) {
  const RtProgram *p = m->prog;
  if (p->nstage_groups == 0) return 0;
  if (!(m->stage_comms = calloc((size_t)p->nstage_groups, sizeof *m->stage_comms))) return -1;
  for (int k = 0; k < p->nstage_groups; k++) {
    int here = 0;
    for (int i = 1; i <= p->stage_groups[k][0]; i++) here |= p->stage_groups[k][i] == m->pp_rank;
    Comm *c = mesh_split(m->pp_comm, here ? 0 : 1, m->pp_rank);
    if (here) m->stage_comms[k] = c;
    else c->destroy(c);
  }
  return 0;
}

/* The pipeline peers this stage's lists send to or receive from. */
static void mesh_connect(Mesh *m) {
  const RtList *lists[5] = {&m->prog->step, &m->prog->sync, &m->prog->gradnorm, &m->prog->update, &m->prog->forward};
  int *peers = calloc((size_t)m->pp + 1, sizeof *peers), n = 0;
  unsigned char *seen = calloc((size_t)m->pp + 1, 1);
  if (!peers || !seen) {
    fflush(stdout);
    fprintf(stderr, "train: out of memory\n");
    m->world->abort(m->world, 1);
  }
  for (int l = 0; l < 5; l++)
    for (int i = 0; i < lists[l]->n; i++) {
      const RtInstr *in = &lists[l]->instr[i];
      if ((in->op == ISA_SEND || in->op == ISA_RECV) && !seen[in->peer]) seen[in->peer] = 1, peers[n++] = in->peer;
    }
  m->pp_comm->connect(m->pp_comm, peers, n);
  free(peers);
  free(seen);
}

int mesh_device_groups(Mesh *m, MeshWrapFn wrap, void *arg, char *err, size_t errlen) {
  /* every group that carries device buffers, whatever its size, so that no MPI call
   * sees a device address (a trivial mesh's tp and pp are self Comms that carry none) */
  if (wrap && m->trivial) {
    m->dp_comm = wrap(arg, m->world, 0);
  } else if (wrap) {
    m->tp_comm = wrap(arg, m->tp_comm, 1);
    m->dp_comm = wrap(arg, m->dp_comm, 1);
    m->pp_comm = wrap(arg, m->pp_comm, 1);
  }
  if (mesh_stage_groups(m) != 0) return file_set_error(err, errlen, "out of memory");
  if (m->pp_comm->connect) mesh_connect(m);
  return 0;
}
