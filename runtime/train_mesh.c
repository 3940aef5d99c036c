/* train_mesh: mesh coordinates and groups, the global parameter view and the checkpoint
 * pieces (see the header).
 */
#include "runtime/train_mesh.h"

#include "runtime/io/fileio.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- groups -------------------------------------------------------------------- */

/* D from the program and the world, or an error naming the mesh. */
static int mesh_size(Mesh *m, const ProgStage *p, int world, char *err, size_t errlen) {
  int64_t tp = p->tp, pp = p->pp, d = p->dp;
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

/* local_of and source from each stage parameter's index among the model's. */
static int global_index(Mesh *m) {
  int gn = (int)m->global.s->nparams;
  m->local_of = malloc((size_t)m->pp * (size_t)gn * sizeof *m->local_of + 1);
  m->source = malloc((size_t)gn * sizeof *m->source + 1);
  if (!m->local_of || !m->source) return -1;
  for (int i = 0; i < m->pp * gn; i++) m->local_of[i] = -1;
  for (int s = m->pp - 1; s >= 0; s--) {
    Prog st = prog_stage(&m->all, s);
    for (int i = 0; i < st.s->nparams; i++)
      m->local_of[s * gn + st.params[i].global] = i, m->source[st.params[i].global] = s;
  }
  return 0;
}

int mesh_init(Mesh *m, const Prog *all, Comm *world, char *err, size_t errlen) {
  memset(m, 0, sizeof *m);
  m->world = world, m->all = *all, m->global = prog_stage(all, -1);
  if (mesh_size(m, m->global.s, world->size, err, errlen) != 0) return -1;
  m->trivial = m->tp == 1 && m->pp == 1;
  if (mesh_groups(m, world) != 0) return file_set_error(err, errlen, "out of memory");
  m->prog = prog_stage(all, m->pp_rank);
  if (global_index(m) != 0) return file_set_error(err, errlen, "out of memory");
  return 0;
}

void mesh_free(Mesh *m) {
  for (int k = 0; m->stage_comms && k < m->prog.s->ngroups; k++)
    if (m->stage_comms[k]) m->stage_comms[k]->destroy(m->stage_comms[k]);
  free(m->stage_comms);
  if (m->tp_comm) m->tp_comm->destroy(m->tp_comm);
  if (m->pp_comm) m->pp_comm->destroy(m->pp_comm);
  if (m->dp_comm && m->dp_comm != m->world) m->dp_comm->destroy(m->dp_comm);
  free(m->local_of), free(m->source);
  memset(m, 0, sizeof *m);
}

/* ---- slices -------------------------------------------------------------------- */

void mesh_slice(const Mesh *m, const ProgParam *l, float *local, const ProgParam *g, float *global, int to_global) {
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

void mesh_scatter(const Mesh *m, const char *gparams, char *params) {
  const Prog *p = &m->prog;
  for (int i = 0; i < p->s->nparams; i++) {
    const ProgParam *g = &m->global.params[p->params[i].global];
    ProgParam l = p->params[i]; /* a piece: its whole tensor, once (host memory holds it all) */
    if (l.start) continue;
    for (int d = 0; d < l.ndim; d++) l.numel = d ? l.numel * l.shape[d] : l.shape[d];
    mesh_slice(m, &l, (float *)(params + l.offset), g, (float *)(gparams + g->offset), 0);
  }
}

/* ---- checkpoint pieces --------------------------------------------------------- */

void mesh_pieces_free(MeshPieces *mp) {
  for (int i = 0; i < mp->n; i++) free((char *)mp->p[i].key);
  free(mp->p), free(mp->global);
  memset(mp, 0, sizeof *mp);
}

/* The rows [*a, *b) of dimension 0 that local parameter l (a piece: ProgParam.start) holds. */
static void piece_rows(const ProgParam *l, int64_t *a, int64_t *b) {
  int64_t inner = 1;
  for (int d = 1; d < l->ndim; d++) inner *= l->shape[d];
  *a = l->ndim ? l->start / inner : 0, *b = l->ndim ? (l->start + l->numel) / inner : 1;
}

/* Adds local parameter l's blocks in one array (key prefix + name): of a piece, the part of
 * each block among its rows. */
static int add_blocks(MeshPieces *mp, const Mesh *m, const ProgParam *l, const ProgParam *g, const char *prefix,
                      char *base, int *cap) {
  int nb = l->tp_dim >= 0 ? (int)l->tp_blocks : 1;
  int64_t a, b;
  piece_rows(l, &a, &b);
  for (int k = 0; k < nb; k++) {
    int64_t lo = a, hi = b, c = l->tp_dim >= 0 ? l->shape[l->tp_dim] / l->tp_blocks : 0;
    if (l->tp_dim == 0) lo = lo > k * c ? lo : k * c, hi = hi < (k + 1) * c ? hi : (k + 1) * c;
    if (lo >= hi) continue;
    if (mp->n == *cap) {
      *cap = 2 * *cap + 8;
      ShardPiece *q = realloc(mp->p, (size_t)*cap * sizeof *q);
      if (q) mp->p = q;
      int *gl = q ? realloc(mp->global, (size_t)*cap * sizeof *gl) : NULL;
      if (!gl) return -1;
      mp->global = gl;
    }
    ShardPiece *w = &mp->p[mp->n];
    memset(w, 0, sizeof *w);
    if (asprintf((char **)&w->key, "%s%s", prefix, prog_str(&m->global, g->name)) < 0) return -1;
    mp->global[mp->n++] = (int)l->global;
    w->ndim = (int)l->ndim, w->gshape = g->shape, w->ashape = l->shape;
    w->data = (float *)(base + l->offset - l->start * 4); /* the whole tensor's (the piece's rows are read) */
    for (int d = 0; d < w->ndim; d++) w->count[d] = l->shape[d];
    if (l->tp_dim >= 0) {
      w->count[l->tp_dim] = c, w->astart[l->tp_dim] = k * c;
      w->gstart[l->tp_dim] = k * c * m->tp + m->tp_rank * c;
    }
    if (w->ndim) /* the piece's rows of the block */
      w->count[0] = hi - lo, w->gstart[0] += lo - w->astart[0], w->astart[0] = lo;
  }
  return 0;
}

int mesh_pieces(const Mesh *m, const MeshPieceRule *r, char *params, char *opt, MeshPieces *mp) {
  const Prog *p = &m->prog;
  int cap = 0, adamw = prog_moments(p->s) == 2, has_opt = r->opt && p->s->tiers[TIER_OPT] > 0;
  memset(mp, 0, sizeof *mp);
  for (int i = 0; i < p->s->nparams; i++) {
    const ProgParam *l = &p->params[i], *g = &m->global.params[l->global];
    int gi = (int)l->global, param, state;
    if (r->writing) { /* each element once: the lowest stage, one tp rank of a replica, one dp rank */
      int here = m->source[gi] == m->pp_rank && (l->tp_dim >= 0 || m->tp_rank == gi % m->tp);
      param = here && (r->zero_stage == 3 ? r->owned[i] : m->dp_rank == gi % m->dp);
      state = here && (r->zero_stage >= 1 ? r->owned[i] : m->dp_rank == gi % m->dp);
    } else {
      param = r->params_owned_only ? r->owned[i] : 1;
      state = r->owned[i];
    }
    if ((param && r->params && add_blocks(mp, m, l, g, r->params_prefix, params, &cap) != 0) ||
        (state && has_opt && add_blocks(mp, m, l, g, "opt_m/", opt, &cap) != 0) ||
        (state && has_opt && adamw && add_blocks(mp, m, l, g, "opt_v/", opt + p->s->opt_v_offset, &cap) != 0)) {
      mesh_pieces_free(mp);
      return -1;
    }
  }
  return 0;
}

/* Stage st's fp8 states between its layout (fp8_rows x width) and the model's
 * (fp8_total x width), by its runs: from `from` in one layout into `to` in the other (the
 * model's when to_model). */
static void fp8_place(const Prog *st, const float *from, float *to, int to_model) {
  int64_t w = st->s->fp8_width;
  for (int i = 0; i < st->s->fp8_nruns; i++) {
    const int64_t *r = &st->ints[st->s->fp8_runs + 3 * i];
    int64_t src = to_model ? r[1] : r[0], dst = to_model ? r[0] : r[1];
    memcpy(to + dst * w, from + src * w, (size_t)(r[2] * w) * sizeof *to);
  }
}

void mesh_fp8_gather(Mesh *m, const float *local, float *model) {
  Comm *w = m->world;
  if (m->dp_rank != 0 || m->tp_rank != 0) return;
  for (int s = 0; s < m->pp; s++) {
    Prog st = prog_stage(&m->all, s);
    if (w->rank == 0 && s == m->pp_rank) fp8_place(&st, local, model, 1);
    else if (w->rank == 0 || s == m->pp_rank) /* run by run, straight into place */
      for (int i = 0; i < st.s->fp8_nruns; i++) {
        const int64_t *r = &st.ints[st.s->fp8_runs + 3 * i], n = r[2] * st.s->fp8_width;
        if (w->rank == 0) w->recv(w, model + r[0] * st.s->fp8_width, n, s * m->dp * m->tp); /* its dp 0, tp 0 */
        else w->send(w, local + r[1] * st.s->fp8_width, n, 0);
      }
  }
}

void mesh_fp8_scatter(const Mesh *m, const float *model, float *local) { fp8_place(&m->prog, model, local, 0); }

/* ---- groups of stages ---------------------------------------------------------- */

/* The program's stage groups (the holders of tied parameters: INTS, each its count then
 * its stages), split from the pp group in the program's order: every stage makes every
 * split, and keeps those it is in. */
static int mesh_stage_groups(Mesh *m) {
  const Prog *p = &m->prog;
  if (p->s->ngroups == 0) return 0;
  if (!(m->stage_comms = calloc((size_t)p->s->ngroups, sizeof *m->stage_comms))) return -1;
  const int64_t *g = &p->ints[p->s->groups];
  for (int k = 0; k < p->s->ngroups; k++, g += 1 + g[0]) {
    int here = 0;
    for (int i = 1; i <= g[0]; i++) here |= g[i] == m->pp_rank;
    Comm *c = mesh_split(m->pp_comm, here ? 0 : 1, m->pp_rank);
    if (here) m->stage_comms[k] = c;
    else c->destroy(c);
  }
  return 0;
}

/* The pipeline peers this stage's lists send to or receive from (the program's). */
static void mesh_connect(Mesh *m) {
  const ProgStage *s = m->prog.s;
  int *peers = calloc((size_t)s->npeers + 1, sizeof *peers);
  if (!peers) {
    fflush(stdout);
    fprintf(stderr, "train: out of memory\n");
    m->world->abort(m->world, 1);
  }
  for (int i = 0; i < s->npeers; i++) peers[i] = (int)m->prog.ints[s->peers + i];
  m->pp_comm->connect(m->pp_comm, peers, (int)s->npeers);
  free(peers);
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
