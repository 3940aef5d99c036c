/* train_loop: start-up, the step loop, validation, checkpoints and the final save
 * (see the header). Nothing is allocated after trainer_init: every buffer the loop
 * touches (batch, read-backs, host views of the tiers) exists by then; ZeRO-3 and
 * checkpoints under ZeRO commit memory inside tiers reserved at start-up.
 */
#include "runtime/train_loop.h"

#include "runtime/io/fileio.h"
#include "runtime/offload.h"
#include "runtime/philox.h"
#ifdef COLOSSALC_HAVE_CUDA
#include "runtime/device/cuda.h"
#endif
#include "runtime/io/ckpt.h"
#include "runtime/comm/watchdog.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void ckpt_join(CkptJob *j);
static void ckpt_before_update(void *arg);

/* ---- start-up ------------------------------------------------------------------ */

/* The program's optimizer settings with the flags' overrides. */
static int trainer_apply_overrides(Trainer *t, const TrainOpts *o, char *err, size_t errlen) {
  const ProgStage *s = t->prog->s;
  ExecHp *hp = &t->hp;
  ExecHp from = {s->optimizer,     s->schedule,     s->lr,         s->beta1,        s->beta2,
                 s->eps,           s->weight_decay, s->momentum,   s->clip,         s->min_lr,
                 s->warmup,        s->loss_scaling, s->scale_init, s->scale_growth, s->scale_backoff,
                 s->scale_interval};
  *hp = from;
  double *over[7] = {&hp->lr, &hp->min_lr, &hp->clip, &hp->weight_decay, &hp->beta1, &hp->beta2, &hp->eps};
  const double given[7] = {o->lr, o->min_lr, o->clip, o->weight_decay, o->beta1, o->beta2, o->eps};
  for (int i = 0; i < 7; i++) *over[i] = isnan(given[i]) ? *over[i] : given[i];
  hp->warmup = o->warmup >= 0 ? o->warmup : hp->warmup;
  hp->schedule = o->schedule >= 0 ? (ProgSchedule)o->schedule : hp->schedule;
  if (!isnan(o->loss_scale) && !hp->loss_scaling)
    return file_set_error(err, errlen,
                          "--loss-scale: this program does not scale its loss "
                          "(only fp16 programs do: colossalc --precision fp16)");
  hp->scale_init = isnan(o->loss_scale) ? hp->scale_init : o->loss_scale;
  return 0;
}

static int trainer_open_data(Trainer *t, const char *path, DataFile **df, char *err, size_t errlen) {
  if (!path) return 0;
  *df = data_open(path, t->prog, t->global_batch, t->mesh.dp, err, errlen);
  return *df ? 0 : -1;
}

/* The bytes of input i's rows of a step. */
static int64_t rows_bytes(const Prog *p, int i) {
  return p->s->batch * p->s->microbatches * p->inputs[i].row_elems * 4;
}

static int trainer_alloc_host(Trainer *t, char *err, size_t errlen) {
  const Prog *p = t->prog;
  int ok = 1;
  for (int i = 0; i < p->s->ninputs; i++) /* this rank's rows of a step, uploaded every
                                           * micro-batch: the device's staging memory */
    ok &= (t->rows[i] = exec_host_alloc(t->dev, rows_bytes(p, i))) != NULL;
  t->logits_row = calloc((size_t)p->s->vocab, sizeof *t->logits_row);
  t->context = calloc((size_t)p->s->seq, sizeof *t->context);
  ok &= t->logits_row && t->context;
  for (int tier = TIER_PARAMS; ok && tier <= TIER_OPT; tier += TIER_OPT) {
    /* offload: the state is at its homes, gathered here for file I/O */
    t->host[tier] = p->s->offload ? NULL : exec_host_tier(&t->ex, tier);
    if (!t->host[tier]) { /* device memory: a host copy for file I/O */
      t->staged = 1;
      ok = (t->host[tier] = calloc((size_t)p->s->tiers[tier] + 1, 1)) != NULL;
    }
  }
  return ok ? 0 : file_set_error(err, errlen, "out of memory for host buffers");
}

/* Host copies of PARAMS and OPT ← device (before a file write) or → (after a read);
 * of an offload program ← / → each part's home (an NVMe error fails). */
static int trainer_host_pull(Trainer *t, char *err, size_t errlen) {
  if (t->ex.off) return offload_pull(t->ex.off, t->host[TIER_PARAMS], t->host[TIER_OPT], err, errlen);
  if (t->staged)
    for (int tier = TIER_PARAMS; tier <= TIER_OPT; tier += TIER_OPT)
      exec_read(&t->ex, tier, 0, t->host[tier], t->prog->s->tiers[tier]);
  return 0;
}

/* Offload keeps the state at its homes; the whole-state host copies for file I/O
 * (calloc'd, so mapped on demand) give their memory back between uses, so that the
 * host holds the state once, not twice. */
static void trainer_release_staging(Trainer *t) {
  long page = sysconf(_SC_PAGESIZE);
  for (int tier = TIER_PARAMS; t->ex.off && page > 0 && tier <= TIER_OPT; tier += TIER_OPT) {
    uintptr_t lo = ((uintptr_t)t->host[tier] + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    uintptr_t hi = ((uintptr_t)t->host[tier] + (uintptr_t)t->prog->s->tiers[tier]) / (uintptr_t)page * (uintptr_t)page;
    if (t->host[tier] && hi > lo)
      madvise((void *)lo, hi - lo, MADV_DONTNEED); /* reads back as zeros; pull rewrites it */
  }
}

static int trainer_host_push(Trainer *t, char *err, size_t errlen) {
  if (t->ex.off) {
    int rc = offload_push(t->ex.off, t->host[TIER_PARAMS], t->host[TIER_OPT], err, errlen);
    trainer_release_staging(t);
    return rc;
  }
  if (t->staged)
    for (int tier = TIER_PARAMS; tier <= TIER_OPT; tier += TIER_OPT)
      exec_write(&t->ex, tier, 0, t->host[tier], t->prog->s->tiers[tier]);
  return 0;
}

/* --save or --save-hf: the parameters are written at the end. */
static int trainer_saves_params(const TrainOpts *o) { return o->save || o->save_hf; }

/* This rank's pieces of the state (train_mesh.h): those it writes of a checkpoint
 * (writing), or those it holds (parameters only unless opt). */
static int trainer_pieces(Trainer *t, int writing, int opt, const char *prefix, MeshPieces *mp, char *err,
                          size_t errlen) {
  MeshPieceRule r = {.writing = writing,
                     .params = 1,
                     .opt = opt,
                     .zero_stage = t->zero.stage,
                     .params_owned_only = t->zero.stage == 3, /* ZeRO-3: each rank its own parameters */
                     .params_prefix = prefix,
                     .owned = t->zero.owned};
  if (mesh_pieces(&t->mesh, &r, t->host[TIER_PARAMS], t->host[TIER_OPT], mp) != 0)
    return file_set_error(err, errlen, "out of memory");
  return 0;
}

/* --init-from on a mesh: the whole file on every rank, then its slices. */
static int trainer_init_from_global(Trainer *t, char *note, size_t notelen, char *err, size_t errlen) {
  const Prog *g = &t->mesh.global;
  char *gparams = calloc((size_t)g->s->tiers[TIER_PARAMS] + 1, 1);
  if (!gparams) return file_set_error(err, errlen, "out of memory for the global parameters");
  int rc = ckpt_load_params(g, t->opts->init_from, gparams, note, notelen, err, errlen);
  if (rc == 0) mesh_scatter(&t->mesh, gparams, t->host[TIER_PARAMS]);
  free(gparams);
  return rc;
}

/* The parameters by their init rules, each rank its own elements. */
static int trainer_init_rules(Trainer *t, char *err, size_t errlen) {
  MeshPieces mp;
  if (trainer_pieces(t, 0, 0, "", &mp, err, errlen) != 0) return -1;
  for (int i = 0; i < mp.n; i++) ckpt_init_piece(&t->mesh.global.params[mp.global[i]], mp.p[i].key, &mp.p[i], t->seed);
  mesh_pieces_free(&mp);
  return 0;
}

/* One checkpoint read into this rank's pieces; -1 with a message when this rank could
 * not (another rank's failure is agreed on by the caller). */
static int trainer_read_ckpt(Trainer *t, const char *name, CkptMeta *m, char *err, size_t errlen) {
  MeshPieces mp = {0};
  ShardSet *s = ckpt_open(&t->mesh.global, t->opts->ckpt_dir, name, m, err, errlen);
  if (!s) return -1;
  int rc = trainer_pieces(t, 0, 1, "param/", &mp, err, errlen);
  for (int i = 0; rc == 0 && i < mp.n; i++) rc = shards_read(s, &mp.p[i], err, errlen);
  if (rc == 0) rc = ckpt_read_fp8(s, m, err, errlen);
  mesh_pieces_free(&mp);
  shards_close(s);
  return rc;
}

/* --resume: the checkpoint DIR/latest names, or when it cannot be read (on any rank)
 * the newest one that can, saying so. */
static int trainer_resume(Trainer *t, CkptMeta *m, char *err, size_t errlen) {
  char names[16][64], why[1024] = "";
  int n = ckpt_candidates(t->opts->ckpt_dir, names, 16, err, errlen);
  if (comm_agree(t->comm, n < 0, err) != 0) return -1;
  for (int i = 0; i < n; i++) {
    int bad = trainer_read_ckpt(t, names[i], m, why, sizeof why) != 0;
    if (comm_agree(t->comm, bad, why) == 0) {
      if (i > 0 && t->comm->rank == 0)
        fprintf(stderr, "train: note: resuming from %s/%s, the newest checkpoint that reads whole\n", t->opts->ckpt_dir,
                names[i]);
      return 0;
    }
    if (why[0]) /* the lowest failing rank says why */
      fprintf(stderr, "train: note: cannot resume from %s/%s: %s\n", t->opts->ckpt_dir, names[i], why);
  }
  return file_set_error(err, errlen, "--resume: no checkpoint in %s reads whole (%d tried)", t->opts->ckpt_dir, n);
}

/* Whether p holds a parameter in pieces (ZeRO's, ProgParam.start). */
static int has_pieces(const Prog *p) {
  for (int i = 0; i < p->s->nparams; i++)
    if (p->params[i].start) return 1;
  return 0;
}

/* The local state from the checkpoint, --init-from or the init rules. */
static int trainer_load_state(Trainer *t, CkptMeta *m, char *note, size_t notelen, char *err, size_t errlen) {
  const TrainOpts *o = t->opts;
  if (o->resume) return trainer_resume(t, m, err, errlen);
  if (o->init_from && (!t->mesh.trivial || has_pieces(t->prog)))
    return trainer_init_from_global(t, note, notelen, err, errlen);
  if (o->init_from) return ckpt_load_params(t->prog, o->init_from, t->host[TIER_PARAMS], note, notelen, err, errlen);
  return trainer_init_rules(t, err, errlen);
}

/* The model's fp8 scaling states (every stage's): rows and width, 0 without. */
static void fp8_shape(const Trainer *t, int64_t *rows, int64_t *width) {
  *rows = t->mesh.global.s->fp8_total, *width = t->mesh.global.s->fp8_width;
}

/* Parameters from the latest checkpoint, --init-from, or the init rules. */
static int trainer_init_state(Trainer *t, char *err, size_t errlen) {
  const TrainOpts *o = t->opts;
  const Prog *p = t->prog;
  int rank0 = t->comm->rank == 0;
  CkptMeta m = {0};
  char note[2048] = "";
  float *fp8 = NULL; /* this rank's scaling states, from the model's */
  fp8_shape(t, &m.fp8_rows, &m.fp8_width);
  if (o->resume && m.fp8_rows &&
      (!(m.fp8 = malloc((size_t)(m.fp8_rows * m.fp8_width) * sizeof *m.fp8)) ||
       !(fp8 = malloc((size_t)(p->s->fp8_rows * m.fp8_width + 1) * sizeof *fp8)))) {
    free(m.fp8);
    return file_set_error(err, errlen, "out of memory");
  }
  int rc = trainer_load_state(t, &m, note, sizeof note, err, errlen);
  if (rc == 0 && m.fp8 && m.fp8_restored && p->s->fp8_rows) { /* every rank its stage's */
    mesh_fp8_scatter(&t->mesh, m.fp8, fp8);
    exec_write(&t->ex, TIER_SHARED, p->s->fp8_offset, fp8, p->s->fp8_rows * m.fp8_width * 4);
  } else if (rc == 0 && m.fp8 && !m.fp8_restored && rank0) {
    fprintf(stderr,
            "train: note: the checkpoint holds no fp8 scaling states of this program's "
            "shape (%" PRId64 " states of history %" PRId64 "): the scales start again\n",
            m.fp8_rows, m.fp8_width - 2);
  }
  free(m.fp8), free(fp8);
  m.fp8 = NULL;
  if (rc != 0) return -1;
  if (rank0 && note[0]) printf("init-from %s\n", note);
  if (o->resume) {
    if (m.global_batch > 0 && m.global_batch != t->global_batch)
      return file_set_error(err, errlen,
                            "--resume: the checkpoint was trained on a global batch of %" PRId64
                            " rows, this run's is %" PRId64 " (%d data-parallel "
                            "rank%s x %" PRId64 " micro-batch%s x batch %" PRId64 "): "
                            "compile for the batch that makes them equal",
                            m.global_batch, t->global_batch, t->mesh.dp, t->mesh.dp == 1 ? "" : "s", p->s->microbatches,
                            p->s->microbatches == 1 ? "" : "es", p->s->batch);
    if (rank0 && o->seed_given && o->seed != m.seed)
      fprintf(stderr, "train: note: --seed %" PRIu64 " ignored: the checkpoint's seed is %" PRIu64 "\n", o->seed,
              m.seed);
    t->step = t->last_ckpt = m.step, t->data_step = m.data_step, t->seed = m.seed;
    if (m.loss_scale > 0) t->ex.step.loss_scale = m.loss_scale; /* fp16: the scale goes on */
    t->ex.step.skipped = m.skipped, t->bad_run = m.bad_steps;   /* and the count of updates */
    if (rank0) printf("resumed from %s at step %" PRId64 "\n", o->ckpt_dir, m.step);
  }
  if (trainer_host_push(t, err, errlen) != 0) return -1;
  zero_release_params(&t->zero, &t->ex); /* ZeRO-3: keep only the owned ones */
  return 0;
}

/* Memory behind each tier on the largest rank, in MiB. */
static void trainer_memory(Trainer *t, double mib[TIERS]) {
  for (int tier = 0; tier < TIERS; tier++) mib[tier] = (double)t->ex.committed[tier] / (1 << 20);
  t->comm->host_all_reduce(t->comm, mib, TIERS, COMM_MAX);
}

/* "params host" when every chunk's home agrees, else "params host 2, nvme 1". */
static void print_homes(const Prog *p, int part) {
  int count[LOC_COUNT] = {0}, kinds = 0;
  for (int c = 0; c < p->s->nchunks; c++) kinds += count[p->chunks[c].home[part]]++ == 0;
  printf("%s", isa_part_names[part]);
  for (int l = LOC_DEVICE, first = 1; l <= LOC_NVME; l++)
    if (count[l]) {
      printf("%s %s", first ? "" : ",", isa_loc_names[l]);
      if (kinds > 1) printf(" %d", count[l]);
      first = 0;
    }
}

/* offload: device 1.25 MiB (capacity), params host 2, nvme 1, device 1; opt nvme; 4 chunks */
static void trainer_offload_banner(Trainer *t) {
  const Prog *p = t->prog;
  const char *dir = offload_nvme_dir(t->ex.off);
  printf("offload: device %.2f MiB (capacity), ", (double)p->s->capacity / (1 << 20));
  print_homes(p, TIER_PARAMS);
  printf("; ");
  print_homes(p, TIER_OPT);
  printf("; %d chunk%s%s%s%s\n", (int)p->s->nchunks, p->s->nchunks == 1 ? "" : "s", dir ? "; nvme files in " : "",
         dir ? t->opts->nvme_dir : "", dir && t->comm->size > 1 ? "/rank-R (one folder per rank)" : "");
}

/* One line, and for several ranks or ZeRO a second with the sharding and the
 * memory it really leaves behind each tier ("of" the whole tier where reserved). */
static void trainer_banner(Trainer *t) {
  const Prog *p = t->prog;
  const ProgStage *s = p->s;
  double mib[TIERS];
  int many = t->comm->size > 1 || t->zero.stage > 0;
  if (many) trainer_memory(t, mib);
  if (t->comm->rank != 0) return;
  printf("model %s | %" PRId64 " parameters | batch %" PRId64, prog_str(p, s->model), t->mesh.global.s->param_elems,
         s->batch);
  if (s->seq > 1) printf(" x %" PRId64 " tokens | vocab %" PRId64, s->seq, s->vocab);
  else printf(" samples | %" PRId64 " classes", s->vocab);
  printf(" | %s, %d threads | %s lr %.2e | cpu kernels for %s, OpenBLAS %s\n", t->dev->name, t->threads,
         prog_opt_names[t->hp.optimizer], t->hp.lr, t->cpu->name, cpu_blas_core());
  if (s->offload) trainer_offload_banner(t);
  if (!many) return;
  /* the device's groups: NCCL over the world's MPI on the CUDA device */
  const char *via = strcmp(t->dev->name, "cuda") ? t->comm->name : "nccl over mpi";
  if (!t->mesh.trivial)
    printf("mesh dp %d x tp %d x pp %d: %d ranks (%s) | %" PRId64 " micro-batch%s a step\n", t->mesh.dp, t->mesh.tp,
           t->mesh.pp, t->comm->size, via, s->microbatches, s->microbatches == 1 ? "" : "es");
  printf("data parallel: %d ranks (%s) | global batch %" PRId64 " x %" PRId64 " | zero %d", t->mesh.dp, via,
         t->global_batch, s->seq, t->zero.stage);
  if (s->offload) { /* the state is at its homes: the offload line says where */
    printf(" | %s\n", t->zero.stage == 3 ? "each rank holds its own chunks at their homes"
                                         : "every rank holds the whole state at its homes");
    return;
  }
  printf(" | memory of the largest rank:");
  for (int tier = TIER_PARAMS; tier <= TIER_OPT; tier++) {
    printf("%s %s %.2f MiB", tier ? "," : "", isa_tier_names[tier], mib[tier]);
    if (exec_reserved(&t->ex, tier)) printf(" of %.2f MiB", (double)s->tiers[tier] / (1 << 20));
  }
  printf("\n");
}

/* DIR made (with its parents) when missing. Several ranks keep their NVMe files apart:
 * DIR/rank-R, made here and removed when empty at the end. NULL: no --nvme-dir. */
static const char *trainer_nvme_dir(Trainer *t, char *err, size_t errlen) {
  const char *dir = t->opts->nvme_dir;
  char why[1024];
  if (dir && file_make_dirs(dir, why, sizeof why) != 0) {
    file_set_error(err, errlen, "--nvme-dir: %s", why);
    return NULL;
  }
  if (!dir || t->comm->size == 1) return dir;
  if (asprintf(&t->nvme_rank_dir, "%s/rank-%d", dir, t->comm->rank) < 0) {
    t->nvme_rank_dir = NULL;
    file_set_error(err, errlen, "out of memory");
    return NULL;
  }
  if (mkdir(t->nvme_rank_dir, 0700) != 0 && errno != EEXIST) {
    file_set_error(err, errlen, "--nvme-dir: cannot create %s: %s", t->nvme_rank_dir, strerror(errno));
    return NULL;
  }
  return t->nvme_rank_dir;
}

/* The host and NVMe locations and the copy thread; sampling must fit the device. */
static int trainer_init_offload(Trainer *t, const ProgKernelFn *kernels, char *err, size_t errlen) {
  const Prog *p = t->prog;
  Device *host = t->dev;
  int ncodes = (int)p->count[PROG_SEC_CODES];
  if (!t->dev->host_view && !(host = t->host_dev = device_cpu_new(kernels, ncodes, t->threads, err, errlen))) return -1;
  /* the plan's host peak of this rank (ProgStage predicted) */
  int64_t keep = p->ints[p->s->predicted + 1 + 3 * (p->s->npredicted > 1 ? t->mesh.dp_rank : 0)];
  if (host != t->dev) /* the host location's memory, pinned for the GPU's copies and kept
                       * pinned up to the plan's host peak */
    device_cpu_pin_through(host, t->dev, keep);
  const char *nvme = trainer_nvme_dir(t, err, errlen);
  if ((t->opts->nvme_dir && !nvme) || offload_init(&t->ex, host, nvme, t->mesh.dp_rank, err, errlen) != 0) return -1;
  int64_t need = offload_sample_bytes(t->ex.off);
  if (t->opts->sample > 0 && need > p->s->capacity)
    return file_set_error(err, errlen,
                          "--sample: sampling runs `forward` with every parameter "
                          "on the device, %.2f MiB with the work tier, and this program's "
                          "plan gives the device %.2f MiB; sample from the saved "
                          "parameters with a program compiled without offload",
                          (double)need / (1 << 20), (double)p->s->capacity / (1 << 20));
  return 0;
}

/* The device --device asks for: cuda by default when the program carries CUDA kernels
 * and a GPU is visible here. Each rank takes the GPU of its local rank. */
static int trainer_open_device(Trainer *t, const ProgKernelFn *kernels, char *err, size_t errlen) {
  const TrainOpts *o = t->opts;
  const Prog *p = t->prog;
  int want = o->device;
#ifdef COLOSSALC_HAVE_CUDA
  const char *cuda = colossalc_cuda_source;
  if (want == TRAIN_DEVICE_AUTO) want = cuda && device_cuda_available() ? TRAIN_DEVICE_CUDA : TRAIN_DEVICE_CPU;
  if (want == TRAIN_DEVICE_CUDA) {
    CudaOptions co = {.ordinal = t->comm->local_rank,
                      .local_ranks = t->comm->local_size,
                      .kernel_cache = o->kernel_cache,
                      .threads = t->threads,
                      .tf32 = o->tf32,
                      .quiet = t->comm->rank != 0,
                      .nccl = t->comm->size > 1};
    t->dev = device_cuda_new(p, cuda, &co, err, errlen);
    return t->dev ? 0 : -1;
  }
#else
  if (want == TRAIN_DEVICE_CUDA)
    return file_set_error(err, errlen,
                          "--device cuda: this train was built without the CUDA device (no CUDA "
                          "toolkit where colossalc was built)");
#endif
  t->dev = device_cpu_new(kernels, (int)p->count[PROG_SEC_CODES], t->threads, err, errlen);
  return t->dev ? 0 : -1;
}

/* Everything of trainer_init that needs no other rank. */
static int trainer_init_local(Trainer *t, const Prog *all, const ProgKernelFn *kernels, char *err, size_t errlen) {
  const TrainOpts *o = t->opts;
  int rank0 = t->comm->rank == 0;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN) / t->comm->local_size; /* shared by the ranks */
  t->threads = o->threads > 0 ? (int)o->threads : cpus > 0 ? (int)(cpus < 1024 ? cpus : 1024) : 1;
  /* first: its group splits are collectives every rank must reach */
  if (mesh_init(&t->mesh, all, t->comm, err, errlen) != 0) return -1;
  const Prog *p = t->prog = &t->mesh.prog;
  if (o->sample > 0 && p->s->no_sample >= 0) return file_set_error(err, errlen, "%s", prog_str(p, p->s->no_sample));
  t->global_batch = p->s->batch * p->s->microbatches * t->mesh.dp;
  if (t->global_batch > INT32_MAX)
    return file_set_error(err, errlen, "global batch of %" PRId64 " rows is too large", t->global_batch);
  if (trainer_apply_overrides(t, o, err, errlen) != 0) return -1;
  if (trainer_open_data(t, o->data, &t->data, err, errlen) || trainer_open_data(t, o->val, &t->val, err, errlen))
    return -1;
  if (rank0 && ((o->ckpt_dir && ckpt_prepare_dir(o->ckpt_dir, err, errlen) != 0) ||
                (o->save && ckpt_check_save_path(o->save, err, errlen) != 0) ||
                (o->save_hf && ckpt_check_save_hf(&t->mesh.global, o->save_hf, err, errlen))))
    return -1;
  if (rank0 && o->log && !(t->log = fopen(o->log, o->resume ? "a" : "w")))
    return file_set_error(err, errlen, "--log %s: cannot open: %s", o->log, strerror(errno));
  return trainer_open_device(t, kernels, err, errlen);
}

#ifdef COLOSSALC_HAVE_CUDA
static Comm *wrap_cuda(void *dev, Comm *host, int own) { return device_cuda_comm(dev, host, own); }
#endif

/* The rest of trainer_init, once every rank has its device: the groups that carry
 * device buffers (collectives to make them), then memory and state. */
static int trainer_init_memory(Trainer *t, const ProgKernelFn *kernels, char *err, size_t errlen) {
  const Prog *p = t->prog;
  MeshWrapFn wrap = NULL;
#ifdef COLOSSALC_HAVE_CUDA
  if (!strcmp(t->dev->name, "cuda") && t->comm->size > 1) wrap = wrap_cuda;
#endif
  /* the step's model FLOPs and the devices' peak, over every rank (an unknown peak
   * anywhere leaves the MFU unknown) */
  double f[3] = {p->s->flops_per_step * (double)p->s->microbatches, t->dev->peak_flops, t->dev->peak_flops > 0 ? 0 : 1};
  t->comm->host_all_reduce(t->comm, f, 3, COMM_SUM);
  t->step_flops = f[0], t->peak_flops = f[2] > 0 ? 0 : f[1];
  /* the compiler's figure for this rank's step memory, the largest over the ranks
   * (unknown, -1, if any rank's program lacks it) */
  int k = p->s->nmemory > 1 ? t->mesh.dp_rank : 0;
  double plan[2] = {k < p->s->nmemory ? (double)(p->ints[p->s->memory + k] + t->dev->own_bytes) : -1, 0};
  plan[1] = -plan[0];
  t->comm->host_all_reduce(t->comm, plan, 2, COMM_MAX);
  t->plan_mem = -plan[1] < 0 ? -1 : plan[0];
  t->plan_ms = p->s->plan_step_s * 1e3;
  if (mesh_device_groups(&t->mesh, wrap, t->dev, err, errlen) != 0 ||
      zero_init(&t->zero, p, t->mesh.dp_comm, err, errlen) != 0)
    return -1;
#ifdef COLOSSALC_HAVE_CUDA
  if (wrap && t->dev->fork && p->s->overlaps && t->mesh.dp_comm->size > 1)
    t->dp_overlap = device_cuda_overlap_comm(t->dev, t->mesh.dp_comm);
#endif
  /* The tiers the program holds in part are reserved where the device can
   * (exec_init_reserved: otherwise the tiers are whole; offload_init checks). */
  if (exec_init_reserved(&t->ex, p, t->dev, (unsigned)p->s->reserved, err, errlen) != 0 ||
      (p->s->offload ? trainer_init_offload(t, kernels, err, errlen) != 0 /* commits the homes */
                     : zero_commit_owned(&t->zero, &t->ex, t->opts->init_from != NULL, err, errlen) != 0) ||
      trainer_alloc_host(t, err, errlen) != 0)
    return -1;
  t->ex.step.hp = t->hp, t->ex.step.steps = t->opts->steps, t->ex.step.loss_scale = t->hp.scale_init;
  t->ex.ctx = (ExecCtx){.world = t->comm,
                        .dp_size = t->mesh.dp,
                        .tp = t->mesh.tp_comm,
                        .dp = t->mesh.dp_comm,
                        .dp_overlap = t->dp_overlap,
                        .stage_groups = t->mesh.stage_comms,
                        .dp_rank = t->mesh.dp_rank,
                        .tp_rank = t->mesh.tp_rank,
                        .pp = t->mesh.pp_comm,
                        .inputs = t->rows,
                        .zero = zero_exec_instr,
                        .zero_arg = &t->zero,
                        .before_update = ckpt_before_update,
                        .update_arg = t};
  return trainer_init_state(t, err, errlen);
}

/* Test only: the steps [range[0], range[1]] of variable name, FIRST[-LAST][:RANK], when
 * they are this rank's (every rank's without RANK); 0, or -1 when unset or malformed. */
static int fault_steps(const Trainer *t, const char *name, int64_t range[2]) {
  const char *v = getenv(name);
  char *end;
  if (!v || !v[0]) return -1;
  long long first = strtoll(v, &end, 10), last = first, rank = -1;
  if (*end == '-') last = strtoll(end + 1, &end, 10);
  if (*end == ':') rank = strtoll(end + 1, &end, 10);
  if (*end || first <= 0 || last < first) {
    if (t->comm->rank == 0) fprintf(stderr, "train: note: %s=%s ignored: expected FIRST[-LAST][:RANK]\n", name, v);
    return -1;
  }
  range[0] = first, range[1] = last;
  return rank < 0 || rank == t->comm->rank ? 0 : -1;
}

/* Test only: COLOSSALC_FAULT_NAN=FIRST[-LAST][:RANK] writes a NaN into a gradient of each
 * step in [FIRST, LAST] on world rank RANK (every rank without it) before the norm
 * (executor.h, fault_nan); COLOSSALC_FAULT_MOVE=STEP[:RANK] fails the first offload move
 * of that step (fault_move). */
static void trainer_fault_env(Trainer *t) {
  int64_t r[2];
  if (fault_steps(t, "COLOSSALC_FAULT_NAN", r) == 0) t->ex.fault_nan[0] = r[0], t->ex.fault_nan[1] = r[1];
  if (fault_steps(t, "COLOSSALC_FAULT_MOVE", r) == 0) t->ex.fault_move = r[0];
}

int trainer_init(Trainer *t, const Prog *all, const ProgCpuBuild *cpu, const TrainOpts *o, Comm *comm, char *err,
                 size_t errlen) {
  const ProgKernelFn *kernels = cpu->kernels;
  memset(t, 0, sizeof *t);
  t->cpu = cpu;
  t->opts = o, t->seed = o->seed;
  t->last_val = t->last_ckpt = -1;
  t->comm = comm;
  if (!comm && !(t->comm = comm_self_new())) return file_set_error(err, errlen, "out of memory");
  t->own_comm = !comm;
  int failed = trainer_init_local(t, all, kernels, err, errlen) != 0;
  if (comm_agree(t->comm, failed, err) != 0) return -1;
  failed = trainer_init_memory(t, kernels, err, errlen) != 0;
  if (comm_agree(t->comm, failed, err) != 0) return -1;
  trainer_fault_env(t);
  trainer_banner(t);
  return 0;
}

void trainer_free(Trainer *t) {
  if (t->job.running) { /* a run that stopped with a checkpoint in flight: not committed */
    ckpt_join(&t->job);
    mesh_pieces_free(&t->job.mp);
    free(t->job.m.fp8);
  }
  if (t->staged)
    for (int tier = TIER_PARAMS; tier <= TIER_OPT; tier += TIER_OPT) free(t->host[tier]);
  if (t->dev) exec_free(&t->ex);
  zero_free(&t->zero);
  if (t->dp_overlap) t->dp_overlap->destroy(t->dp_overlap);
  mesh_free(&t->mesh); /* its groups may live on the device (NCCL) */
  if (t->dev) {        /* the staging memory belongs to the device */
    for (int i = 0; i < PROG_MAX_INPUTS; i++) exec_host_free(t->dev, t->rows[i]);
    t->dev->destroy(t->dev);
  }
  if (t->host_dev) t->host_dev->destroy(t->host_dev);
  if (t->nvme_rank_dir) rmdir(t->nvme_rank_dir); /* its files are gone with the offload state (exec_free) */
  free(t->nvme_rank_dir);
  if (t->log) fclose(t->log);
  data_close(t->data);
  data_close(t->val);
  free(t->logits_row), free(t->context);
  if (t->own_comm) t->comm->destroy(t->comm);
  memset(t, 0, sizeof *t);
}

/* ---- one step ------------------------------------------------------------------ */

int trainer_load_batch(Trainer *t, DataFile *df, int64_t index, char *err, size_t errlen) {
  const Prog *p = t->prog;
  uint32_t key[2]; /* --shuffle: the training data's order (never validation's) */
  int shuffled = t->opts->shuffle && df == t->data;
  if (shuffled) philox_key_derive(t->seed, "shuffle", key);
  if (data_read(df, index, t->mesh.dp_rank, shuffled ? key : NULL, t->rows, err, errlen) != 0) {
    /* the step still runs (the ranks meet in its collectives): on zeros, harmlessly */
    for (int i = 0; i < p->s->ninputs; i++) memset(t->rows[i], 0, (size_t)rows_bytes(p, i));
    return -1;
  }
  return 0;
}

typedef struct StepStats {
  float loss;
  double lr, norm, ms;
  double comm_ms, hidden_ms; /* rank 0's overlapped collectives: their time, the part of it
                                compute went on beside (a device with a communication stream) */
  double mem;                /* the most device memory one rank held during the step, bytes */
  double scale;              /* fp16: the loss scale the step ran with */
  int skipped;               /* an inf or NaN loss or gradient norm: no update */
  int bad;                   /* a numerical fault (ExecStep.bad) */
  int signal;                /* SIGTERM or SIGINT reached a rank by the step's end, or 0 */
} StepStats;

/* ---- signals ------------------------------------------------------------------- */

static atomic_int trainer_signal; /* the first SIGTERM or SIGINT, or 0 */

/* The first SIGTERM or SIGINT is noted for the end of the step in flight; a second ends
 * the process at once with 128 + its number (files are written atomically: the last
 * complete checkpoint stays as it was). Two signals pending together can run their
 * handlers at once on two of the process's threads (the thread pool's, MPI's), so the
 * first is told from the second by one atomic exchange (lock-free: safe in a handler),
 * not a test and a store that both could pass. */
static void trainer_on_signal(int sig) {
  if (atomic_exchange(&trainer_signal, sig) != 0) _exit(128 + sig);
}

void trainer_catch_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = trainer_on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART; /* file I/O and MPI's calls go on */
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
}

/* After a list stopped: -1, err kept where it happened (a batch this rank could not
 * read, the offload's copy thread), empty on the ranks that stopped with it. */
static int trainer_stopped(Trainer *t, int failed_here, char *err, size_t errlen) {
  if (t->ex.off && offload_failed(t->ex.off)) return offload_drain(t->ex.off, err, errlen);
  if (!failed_here && errlen > 0) err[0] = 0;
  return -1;
}

/* Bytes the offload program's moves copied so far (0 without offload). */
static int64_t trainer_offload_moved(Trainer *t) {
  OffloadStats s;
  if (!t->ex.off) return 0;
  offload_stats(t->ex.off, &s);
  return s.moved;
}

/* The step's moves done (or the copy thread's error); counts the step. */
static int trainer_offload_step_end(Trainer *t, int64_t moved0, char *err, size_t errlen) {
  if (offload_drain(t->ex.off, err, errlen) != 0) return -1;
  t->off_steps++;
  t->off_moved += trainer_offload_moved(t) - moved0;
  return 0;
}

/* The tiers' peaks since exec_peak_reset join those of the steps before. */
static void trainer_note_peak(Trainer *t) {
  for (int tier = 0; tier < TIERS; tier++)
    t->step_peak[tier] = t->ex.peak[tier] > t->step_peak[tier] ? t->ex.peak[tier] : t->step_peak[tier];
  t->peak_runs++;
}

/* The program's `train` on this step's batch. A rank whose batch is bad still runs the
 * list (on zeros) to its "norm", whose failure flag stops every rank before the update. */
static int trainer_step(Trainer *t, StepStats *s, char *err, size_t errlen) {
  ExecStep *st = &t->ex.step;
  double t0 = exec_now_ms();
  int64_t moved0 = trainer_offload_moved(t);
  st->failed = trainer_load_batch(t, t->data, t->data_step, err, errlen) != 0;
  exec_begin_step(&t->ex, t->step + 1);
  st->loss = 0;
  exec_peak_reset(&t->ex); /* ZeRO-3's step gathers each parameter where it is used */
  t->ex.prof = t->opts->profile && t->steps_run++ > 0 ? &t->prof : NULL; /* the first step warms up */
  int rc = exec_run(&t->ex, prog_list(t->prog, PROG_LIST_TRAIN));
  ExecProfile *prof = t->ex.prof;
  t->ex.prof = NULL;
  if (rc != 0) return trainer_stopped(t, st->failed, err, errlen);
  *s = (StepStats){
      .loss = st->mean_loss, .lr = st->lr, .norm = st->norm, .scale = st->scale, .skipped = st->skip, .bad = st->bad};
  t->dev->sync(t->dev);
  if (t->dev->overlap_ms) {
    double waited;
    t->dev->overlap_ms(t->dev, &s->comm_ms, &waited);
    s->hidden_ms = s->comm_ms > waited ? s->comm_ms - waited : 0;
  }
  trainer_note_peak(t);
  /* the memory figure and a signal, agreed on so that every rank stops after this step */
  double agreed[2] = {(double)(t->ex.total_peak > st->mem ? t->ex.total_peak : st->mem), atomic_load(&trainer_signal)};
  if (t->comm->size > 1) t->comm->host_all_reduce(t->comm, agreed, 2, COMM_MAX);
  s->mem = agreed[0], s->signal = (int)agreed[1];
  if (t->ex.off && trainer_offload_step_end(t, moved0, err, errlen) != 0)
    return -1; /* one rank: nobody to agree with */
  t->step = st->step, t->data_step++;
  s->ms = exec_now_ms() - t0;
  if (prof) t->prof_ms += s->ms, t->prof_steps++;
  return 0;
}

/* ---- logging ------------------------------------------------------------------- */

/* A JSON number, or null for a non-finite value. */
static void json_num(FILE *f, const char *key, double v, const char *fmt) {
  fprintf(f, ", \"%s\": ", key);
  if (isfinite(v)) fprintf(f, fmt, v);
  else fputs("null", f);
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The plan's claim held to the run: after TRAIN_APART_STEPS steps in a row more than
 * TRAIN_APART from the plan's step time, one warning (rank 0). */
static void trainer_check_plan_time(Trainer *t, const StepStats *s) {
  if (t->plan_ms <= 0 || t->apart_warned) return;
  if (fabs(s->ms / t->plan_ms - 1) <= TRAIN_APART) {
    t->apart_run = 0;
    return;
  }
  t->apart_ms[t->apart_run++] = s->ms;
  if (t->apart_run < TRAIN_APART_STEPS) return;
  qsort(t->apart_ms, TRAIN_APART_STEPS, sizeof *t->apart_ms, by_value);
  double med = t->apart_ms[TRAIN_APART_STEPS / 2];
  const char *cl = t->prog->s->plan_cluster >= 0 ? prog_str(t->prog, t->prog->s->plan_cluster) : "?";
  fflush(stdout);
  fprintf(stderr,
          "train: warning: %d steps in a row took %.3g ms (median) where the plan predicts %.3g ms (%+.0f%%): "
          "this machine is not the cluster the plan was made for (%s), or the cost model is off\n",
          TRAIN_APART_STEPS, med, t->plan_ms, 100 * (med / t->plan_ms - 1), cl);
  t->apart_warned = 1;
}

static void trainer_log_step(Trainer *t, const StepStats *s) {
  int64_t seq = t->prog->s->seq;
  double tps = s->ms > 0 ? (double)(t->global_batch * seq) / (s->ms / 1e3) : 0;
  const char *unit = seq > 1 ? "tok" : "samples"; /* token sequences, or other rows */
  /* model FLOPs of the step over every rank's peak; NaN where a peak is unknown */
  double mfu = t->peak_flops > 0 && s->ms > 0 ? t->step_flops / (s->ms / 1e3) / t->peak_flops : NAN;
  if (t->comm->rank != 0) return;
  trainer_check_plan_time(t, s);
  printf("step %" PRId64 "/%" PRId64 " | loss %.4f | lr %.2e | norm %.3f | %.1f ms", t->step, t->opts->steps, s->loss,
         s->lr, s->norm, s->ms);
  if (t->plan_ms > 0) printf(" (plan %.3g ms)", t->plan_ms);
  printf(" | %.0f %s/s | mem %.1f MiB", tps, unit, s->mem / (1 << 20));
  if (t->plan_mem >= 0) printf(" (plan %.1f MiB)", t->plan_mem / (1 << 20));
  if (s->skipped && t->hp.loss_scaling && isfinite(s->loss))
    printf(" | skipped: inf/NaN gradient at loss scale %g, now %g", s->scale, t->ex.step.loss_scale);
  else if (s->skipped)
    printf(" | skipped: non-finite %s (bad step %" PRId64 " in a row, %" PRId64 " in all)",
           isfinite(s->loss) ? "gradient norm" : "loss", t->bad_run, t->bad_total);
  if (isfinite(mfu)) printf(" | MFU %.1f%%", 100 * mfu);
  if (s->comm_ms > 0) printf(" | comm %.1f ms, %.0f%% hidden", s->comm_ms, 100 * s->hidden_ms / s->comm_ms);
  printf("\n");
  fflush(stdout);
  if (!t->log) return;
  fprintf(t->log, "{\"step\": %" PRId64, t->step);
  json_num(t->log, "loss", s->loss, "%.9g");
  json_num(t->log, "lr", s->lr, "%.9g");
  json_num(t->log, "grad_norm", s->norm, "%.9g");
  json_num(t->log, "ms", s->ms, "%.3f");
  json_num(t->log, "predicted_ms", t->plan_ms > 0 ? t->plan_ms : NAN, "%.4g");
  json_num(t->log, seq > 1 ? "tokens_per_s" : "samples_per_s", tps, "%.1f");
  json_num(t->log, "device_memory_peak", s->mem, "%.0f");
  json_num(t->log, "device_memory_plan", t->plan_mem >= 0 ? t->plan_mem : NAN, "%.0f");
  json_num(t->log, "mfu", mfu, "%.4f");
  if (t->hp.loss_scaling) json_num(t->log, "loss_scale", s->scale, "%.9g");
  fprintf(t->log, ", \"skipped\": %s", s->skipped ? "true" : "false");
  if (s->bad) fprintf(t->log, ", \"bad_steps_in_a_row\": %" PRId64, t->bad_run);
  if (t->dev->overlap_ms) {
    json_num(t->log, "comm_overlap_ms", s->comm_ms, "%.3f");
    json_num(t->log, "comm_hidden_ms", s->hidden_ms, "%.3f");
  }
  fputs("}\n", t->log);
  fflush(t->log);
}

/* ---- validation and checkpoints ------------------------------------------------ */

int trainer_validate(Trainer *t, double *loss, char *err, size_t errlen) {
  double v[2] = {0, 0}; /* sum of losses, failed */
  exec_scalars(&t->ex, 0.0, t->step > 0 ? t->step : 1, 1.0);
  exec_peak_reset(&t->ex);
  for (int b = 0; b < TRAIN_VAL_BATCHES; b++) {
    if (trainer_load_batch(t, t->val, b, err, errlen) != 0) {
      v[1] = 1;
      break;
    }
    t->ex.step.loss = 0;
    /* `eval` alone leaves an offload program's parts mid-step: back home */
    if (exec_run(&t->ex, prog_list(t->prog, PROG_LIST_EVAL)) != 0 ||
        (t->ex.off && offload_home(t->ex.off, "validation", err, errlen) != 0)) {
      if (t->ex.off) offload_drain(t->ex.off, err, errlen);
      v[1] = 1;
      break;
    }
    v[0] += t->ex.step.loss / (double)t->prog->s->microbatches;
  }
  int failed = v[1] > 0;
  trainer_note_peak(t);
  t->comm->host_all_reduce(t->comm, v, 2, COMM_SUM);
  if (v[1] > 0) {
    if (!failed && errlen > 0) err[0] = 0;
    return -1;
  }
  *loss = v[0] / t->mesh.dp / TRAIN_VAL_BATCHES;
  return 0;
}

static int trainer_run_val(Trainer *t, char *err, size_t errlen) {
  double loss;
  watchdog_timed(1);
  int rc = trainer_validate(t, &loss, err, errlen);
  watchdog_timed(0);
  if (rc != 0) return -1;
  t->last_val = t->step;
  if (t->comm->rank != 0) return 0;
  printf("val %" PRId64 " | loss %.4f (%d batches)\n", t->step, loss, TRAIN_VAL_BATCHES);
  if (t->log) {
    fprintf(t->log, "{\"step\": %" PRId64, t->step);
    json_num(t->log, "val_loss", loss, "%.9g");
    fprintf(t->log, ", \"val_batches\": %d}\n", TRAIN_VAL_BATCHES);
    fflush(t->log);
  }
  return 0;
}

/* fp8's scaling states of every stage in the model's order, on rank 0 (m->fp8). */
static int trainer_fp8_gather(Trainer *t, CkptMeta *m, char *err, size_t errlen) {
  const Prog *p = t->prog;
  int rc = 0, rank0 = t->comm->rank == 0;
  int64_t n = p->s->fp8_rows * m->fp8_width;
  float *local = malloc((size_t)(n + 1) * sizeof *local);
  if (rank0) m->fp8 = malloc((size_t)(m->fp8_rows * m->fp8_width) * sizeof *m->fp8);
  if (!local || (rank0 && !m->fp8)) rc = file_set_error(err, errlen, "out of memory");
  if (comm_agree(t->comm, rc != 0, err) != 0) {
    free(local);
    return -1;
  }
  if (n) exec_read(&t->ex, TIER_SHARED, p->s->fp8_offset, local, n * 4);
  mesh_fp8_gather(&t->mesh, local, m->fp8);
  free(local);
  return 0;
}

/* The writing thread: this rank's shard, read back and checked. */
static void *ckpt_writer(void *arg) {
  CkptJob *j = arg;
  j->rc = ckpt_save_shard(j->dir, j->m.step, j->rank, j->ranks, j->mp.p, j->mp.n, 1, j->err, sizeof j->err);
  __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void ckpt_join(CkptJob *j) {
  if (j->running && !j->joined) pthread_join(j->thread, NULL);
  j->joined = 1;
}

/* The executor's before_update: the state a checkpoint is written from stays as it was
 * until the write is done (the step waits, counted as blocked). */
static void ckpt_before_update(void *arg) {
  Trainer *t = arg;
  CkptJob *j = &t->job;
  if (!j->running || !j->live || j->joined) return;
  double t0 = exec_now_ms();
  watchdog_timed(0); /* checkpoint writing: not cut short by --collective-timeout */
  ckpt_join(j);
  watchdog_timed(1);
  j->blocked_ms += exec_now_ms() - t0;
}

/* Waits for the write in flight, then (every rank's shard written) rank 0 writes the
 * index and `latest`, which make the checkpoint; a failed shard anywhere discards it. */
static int trainer_ckpt_complete(Trainer *t, char *err, size_t errlen) {
  CkptJob *j = &t->job;
  if (!j->running) return 0;
  double t0 = exec_now_ms();
  ckpt_join(j);
  j->blocked_ms += exec_now_ms() - t0;
  mesh_pieces_free(&j->mp);
  trainer_release_staging(t);
  j->running = 0;
  int rc = j->rc, rank0 = t->comm->rank == 0;
  if (rc != 0) snprintf(err, errlen, "%s", j->err);
  if (comm_agree(t->comm, rc != 0, err) != 0) {
    if (rank0) ckpt_discard(j->dir, j->m.step); /* the previous ones stay */
    free(j->m.fp8), j->m.fp8 = NULL;
    return -1;
  }
  rc = rank0 ? ckpt_commit(&t->mesh.global, j->dir, &j->m, t->opts->keep_ckpts, err, errlen) : 0;
  free(j->m.fp8), j->m.fp8 = NULL;
  if (comm_agree(t->comm, rc != 0, err) != 0) return -1;
  t->last_ckpt = j->m.step;
  if (t->comm->rank == 0)
    printf("checkpoint %s/ckpt-%" PRId64 " (%d shard%s): the steps were blocked %.1f ms, the rest written in the "
           "background (%.0f ms in all)\n",
           j->dir, j->m.step, j->ranks, j->ranks == 1 ? "" : "s", j->blocked_ms, exec_now_ms() - j->t0);
  fflush(stdout);
  return 0;
}

/* After a step with a checkpoint in flight: committed once every rank's shard is. */
static int trainer_ckpt_poll(Trainer *t, char *err, size_t errlen) {
  if (!t->job.running) return 0;
  double done = __atomic_load_n(&t->job.done, __ATOMIC_ACQUIRE);
  if (t->comm->size > 1) t->comm->host_all_reduce(t->comm, &done, 1, COMM_MIN);
  return done > 0 ? trainer_ckpt_complete(t, err, errlen) : 0;
}

/* A checkpoint of the state after this step: the step blocks while the state is brought
 * to host memory this rank writes from (the device's copies, or the homes of an offload
 * program; nothing for the CPU device's own tiers), and each rank's shard is written on
 * a thread while training goes on (its tiers stay as they are until then: the next
 * update waits, ckpt_before_update). wait: commit it before returning. */
static int trainer_run_ckpt(Trainer *t, int wait, char *err, size_t errlen) {
  CkptJob *j = &t->job;
  if (trainer_ckpt_complete(t, err, errlen) != 0) return -1; /* the one before */
  const ExecStep *st = &t->ex.step;
  memset(j, 0, sizeof *j);
  j->t0 = exec_now_ms();
  j->m = (CkptMeta){.step = t->step,
                    .data_step = t->data_step,
                    .seed = t->seed,
                    .threads = t->threads,
                    .global_batch = t->global_batch,
                    .loss_scale = st->loss_scale,
                    .skipped = st->skipped,
                    .bad_steps = t->bad_run,
                    .ranks = t->comm->size};
  j->dir = t->opts->ckpt_dir, j->rank = t->comm->rank, j->ranks = t->comm->size;
  fp8_shape(t, &j->m.fp8_rows, &j->m.fp8_width);
  if (j->m.fp8_rows && trainer_fp8_gather(t, &j->m, err, errlen) != 0) return -1;
  int rc = trainer_host_pull(t, err, errlen); /* one rank when it fails (offload) */
  if (rc == 0) rc = trainer_pieces(t, 1, 1, "param/", &j->mp, err, errlen);
  if (rc == 0 && j->m.fp8) { /* rank 0's: the whole states */
    ShardPiece *q = realloc(j->mp.p, (size_t)(j->mp.n + 1) * sizeof *q);
    char *key = strdup(CKPT_FP8);
    if (q) j->mp.p = q;
    if (!q || !key) {
      free(key);
      rc = file_set_error(err, errlen, "out of memory");
    } else {
      int64_t *shape = j->fp8_shape;
      shape[0] = j->m.fp8_rows, shape[1] = j->m.fp8_width;
      j->mp.p[j->mp.n++] =
          (ShardPiece){.key = key, .ndim = 2, .gshape = shape, .count = {shape[0], shape[1]}, .data = j->m.fp8};
    }
  }
  if (comm_agree(t->comm, rc != 0, err) != 0) {
    mesh_pieces_free(&j->mp);
    free(j->m.fp8), j->m.fp8 = NULL;
    trainer_release_staging(t);
    return -1;
  }
  j->live = !t->staged && !t->ex.off; /* else host[] are copies only the next pull rewrites */
  j->running = 1;
  if (wait || pthread_create(&j->thread, NULL, ckpt_writer, j) != 0) {
    ckpt_writer(j); /* here and now */
    j->joined = 1;
  }
  j->blocked_ms = exec_now_ms() - j->t0;
  return wait ? trainer_ckpt_complete(t, err, errlen) : 0;
}

/* After a step: validation and checkpoint when due (every N, and after the last). */
static int trainer_after_step(Trainer *t, char *err, size_t errlen) {
  const TrainOpts *o = t->opts;
  int last = t->step == o->steps;
  if (o->val && ((o->val_every > 0 && t->step % o->val_every == 0) || last) && trainer_run_val(t, err, errlen) != 0)
    return -1;
  if (trainer_ckpt_poll(t, err, errlen) != 0) return -1;
  if (o->ckpt_dir && ((o->ckpt_every > 0 && t->step % o->ckpt_every == 0) || last) &&
      trainer_run_ckpt(t, 0, err, errlen) != 0)
    return -1;
  return 0;
}

/* A checkpoint of this step unless the last one is of it: 0, or -1 (err). */
static int trainer_ckpt_now(Trainer *t, char *err, size_t errlen) {
  if (trainer_ckpt_complete(t, err, errlen) != 0) return -1; /* one in flight, committed */
  return t->last_ckpt == t->step ? 0 : trainer_run_ckpt(t, 1, err, errlen);
}

/* SIGTERM or SIGINT after the step in flight: a checkpoint with --ckpt-dir (status 0),
 * else nothing saved (128 + the signal); --save, --save-hf and --sample are not done. */
static int trainer_preempted(Trainer *t, int sig, char *err, size_t errlen) {
  const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
  if (t->opts->ckpt_dir && trainer_ckpt_now(t, err, errlen) != 0) return -1;
  t->halted = 1, t->exit_status = t->opts->ckpt_dir ? 0 : 128 + sig;
  if (t->comm->rank != 0) return 0;
  fflush(stdout);
  if (t->opts->ckpt_dir)
    fprintf(stderr, "train: %s at step %" PRId64 ": checkpoint written to %s, exiting\n", name, t->step,
            t->opts->ckpt_dir);
  else
    fprintf(stderr, "train: %s at step %" PRId64 ": nothing could be saved (no --ckpt-dir), exiting\n", name, t->step);
  return 0;
}

/* --on-nan stop on a bad step, or --max-bad-steps of them in a row: the state is the last
 * good one (the bad updates were skipped), checkpointed with --ckpt-dir; -1 with the
 * message. 0: train on. */
static int trainer_numerical_stop(Trainer *t, const StepStats *s, char *err, size_t errlen) {
  const TrainOpts *o = t->opts;
  int stop = s->bad && o->on_nan == TRAIN_NAN_STOP, many = o->max_bad_steps > 0 && t->bad_run >= o->max_bad_steps;
  char why[200], saved[4200] = "; no --ckpt-dir: nothing saved";
  if (!stop && !many) return 0;
  if (o->ckpt_dir && trainer_ckpt_now(t, err, errlen) != 0) return -1;
  if (o->ckpt_dir)
    snprintf(saved, sizeof saved, "; the last good state (%" PRId64 " updates) is in %s/ckpt-%" PRId64,
             t->step - t->ex.step.skipped, o->ckpt_dir, t->step);
  if (stop)
    snprintf(why, sizeof why, "step %" PRId64 ": non-finite %s (--on-nan stop): its update was skipped", t->step,
             isfinite(s->loss) ? "gradient norm" : "loss");
  else
    snprintf(why, sizeof why,
             "steps %" PRId64 "-%" PRId64 ": %" PRId64 " consecutive steps with a non-finite loss or gradient norm "
             "(--max-bad-steps %" PRId64 "): their updates were skipped",
             t->step - t->bad_run + 1, t->step, t->bad_run, o->max_bad_steps);
  if (t->comm->rank != 0) return err[0] = 0, -1;
  return file_set_error(err, errlen, "%s%s; stopping", why, saved);
}

/* One step under the watchdog's timeout, its bad steps counted. */
static int trainer_timed_step(Trainer *t, StepStats *s, char *err, size_t errlen) {
  watchdog_step(t->step + 1);
  watchdog_timed(1);
  int rc = trainer_step(t, s, err, errlen);
  watchdog_timed(0);
  if (rc != 0) return -1;
  if (s->bad) t->bad_run++, t->bad_total++;
  else if (!s->skipped) t->bad_run = 0; /* fp16's overflow skips neither count nor reset */
  return 0;
}

int trainer_run(Trainer *t, char *err, size_t errlen) {
  StepStats s;
  while (t->step < t->opts->steps) {
    if (trainer_timed_step(t, &s, err, errlen) != 0) return -1;
    trainer_log_step(t, &s);
    if (s.signal) return trainer_preempted(t, s.signal, err, errlen);
    if (trainer_numerical_stop(t, &s, err, errlen) != 0) return -1;
    if (trainer_after_step(t, err, errlen) != 0) return -1;
  }
  if (trainer_ckpt_complete(t, err, errlen) != 0) return -1; /* the last one written */
  if (t->opts->val && t->last_val != t->step)                /* e.g. --steps 0: evaluate the model */
    return trainer_run_val(t, err, errlen);
  return 0;
}

static void report_one(const char *what, int64_t got, const int64_t *pred, int k) {
  printf(" | %s %.2f MiB (predicted %.2f MiB)", what, (double)got / (1 << 20), (double)pred[k] / (1 << 20));
}

/* The measured peaks, bytes moved and time waited, beside the plan's prediction:
 * one line, and a last --log record {"step": N, "offload": {...}}. */
static void trainer_offload_report(Trainer *t) {
  static const char *const keys[4] = {"device_peak", "host_peak", "nvme_peak", "transfer_bytes"};
  const ProgStage *ps = t->prog->s;
  const int64_t *rank = &t->prog->ints[ps->predicted + 1 + 3 * (ps->npredicted > 1 ? t->mesh.dp_rank : 0)];
  const int64_t pred[4] = {t->prog->ints[ps->predicted], rank[0], rank[1], rank[2]}; /* the plan's */
  OffloadStats s;
  offload_stats(t->ex.off, &s);
  int64_t per_step = t->off_steps > 0 ? t->off_moved / t->off_steps : 0;
  int64_t got[4] = {s.peak[0], s.peak[1], s.peak[2], per_step};
  if (t->comm->size > 1) /* every rank's own peaks */
    printf("rank %d: ", t->comm->rank);
  printf("offload: device peak %.2f MiB of %.2f MiB capacity", (double)got[0] / (1 << 20),
         (double)s.capacity / (1 << 20));
  printf(" (predicted %.2f MiB)", (double)pred[0] / (1 << 20));
  report_one("host peak", got[1], pred, 1);
  report_one("nvme peak", got[2], pred, 2);
  report_one("moved per step", got[3], pred, 3);
  printf(" | %" PRId64 " moves, %" PRId64 " drops | waited %.1f ms\n", s.moves, s.drops, s.wait_ms);
  fflush(stdout);
  if (!t->log) return;
  fprintf(t->log, "{\"step\": %" PRId64 ", \"offload\": {\"device_capacity\": %" PRId64, t->step, s.capacity);
  for (int k = 0; k < 4; k++) fprintf(t->log, ", \"%s\": %" PRId64, keys[k], got[k]);
  for (int k = 0; k < 4; k++) fprintf(t->log, ", \"predicted_%s\": %" PRId64, keys[k], pred[k]);
  fprintf(t->log, ", \"steps\": %" PRId64 ", \"moved_bytes\": %" PRId64 ", \"moves\": %" PRId64 ", \"drops\": %" PRId64,
          t->off_steps, s.moved + s.moved_runtime, s.moves, s.drops);
  json_num(t->log, "wait_ms", s.wait_ms, "%.3f");
  fputs("}}\n", t->log);
  fflush(t->log);
}

/* Rank 0's part of the end: --save and --save-hf from the parameters' shards in
 * parts (a set every rank wrote), --sample, the log. */
static int trainer_finish_rank0(Trainer *t, const char *parts, char *err, size_t errlen) {
  const TrainOpts *o = t->opts;
  const Prog *g = &t->mesh.global;
  ShardSet *s = parts ? shards_open(parts, err, errlen) : NULL;
  if (parts && !s) return -1;
  int rc = 0;
  if (o->save && (rc = ckpt_save_params_set(g, o->save, s, err, errlen)) == 0)
    printf("saved parameters to %s\n", o->save);
  if (rc == 0 && o->save_hf && (rc = ckpt_save_hf_set(g, o->save_hf, s, err, errlen)) == 0)
    printf("saved a transformers model to %s\n", o->save_hf);
  shards_close(s);
  if (rc != 0) return -1;
  if (o->sample > 0 && trainer_sample(t, o->sample, stdout, err, errlen) != 0) return -1;
  if (t->log && (ferror(t->log) || fflush(t->log) != 0))
    return file_set_error(err, errlen, "--log %s: write failed", o->log);
  return 0;
}

/* The parameters' shards for --save and --save-hf: every rank writes its pieces into
 * the folder parts (beside the first target), rank 0 the index. */
static int trainer_write_parts(Trainer *t, const char *parts, char *err, size_t errlen) {
  int rank0 = t->comm->rank == 0;
  int rc = rank0 && mkdir(parts, 0777) != 0 && errno != EEXIST
               ? file_set_error(err, errlen, "cannot create %s: %s", parts, strerror(errno))
               : 0;
  if (comm_agree(t->comm, rc != 0, err) != 0) return -1;
  MeshPieces mp = {0};
  rc = trainer_pieces(t, 1, 0, "", &mp, err, errlen);
  if (rc == 0) rc = ckpt_write_shard(parts, t->comm->rank, t->comm->size, mp.p, mp.n, 0, err, errlen);
  mesh_pieces_free(&mp);
  if (comm_agree(t->comm, rc != 0, err) != 0) return -1;
  return rank0 ? ckpt_write_index(parts, t->comm->size, "colossalc-parameters", NULL, NULL, 0, err, errlen) : 0;
}

/* The peaks of trainer_note_peak on the largest rank: one line and a --log record
 * (train_loop.h), for several ranks or ZeRO, when a step or validation ran. */
static void trainer_peak_report(Trainer *t) {
  const char *const *names = isa_tier_names;
  double peak[TIERS];
  if ((t->comm->size == 1 && t->zero.stage == 0) || t->peak_runs == 0) return;
  for (int tier = 0; tier < TIERS; tier++) peak[tier] = (double)t->step_peak[tier];
  t->comm->host_all_reduce(t->comm, peak, TIERS, COMM_MAX);
  if (t->comm->rank != 0) return;
  printf("peak memory of the largest rank in the steps:");
  for (int tier = TIER_PARAMS; tier <= TIER_OPT; tier++)
    printf(" %s %.2f MiB of %.2f MiB,", names[tier], peak[tier] / (1 << 20),
           (double)t->prog->s->tiers[tier] / (1 << 20));
  printf(" work %.2f MiB\n", peak[TIER_WORK] / (1 << 20));
  fflush(stdout);
  if (!t->log) return;
  fprintf(t->log, "{\"step\": %" PRId64 ", \"memory_peak\": {", t->step);
  for (int tier = 0; tier < TIERS; tier++) fprintf(t->log, "%s\"%s\": %.0f", tier ? ", " : "", names[tier], peak[tier]);
  fputs("}}\n", t->log);
  fflush(t->log);
}

/* --profile: every rank's figures on rank 0, one line a rank, in milliseconds per step
 * by opcode (those that took time on some rank) and "outside" the list (reading the
 * batch, the ranks' agreement after the step), then the device's compute (kernels,
 * GEMMs, zeroing) beside the plan's for the stage (ProgStage.plan_compute_s), and a
 * --log record {"step": N, "profile": {...}}. */
enum { PROF_STAGE, PROF_DP, PROF_TP, PROF_STEP, PROF_PLAN, PROF_OPS, PROF_ROW = PROF_OPS + ISA_NOPS };
static void trainer_profile_report(Trainer *t) {
  int n = t->comm->size, me = t->comm->rank;
  if (t->prof_steps == 0) { /* alike on every rank */
    if (me == 0) fprintf(stderr, "train: --profile: no step after the first ran: nothing to show\n");
    return;
  }
  double *all = calloc((size_t)n * PROF_ROW, sizeof *all), *row = all + (size_t)me * PROF_ROW;
  if (!all) { /* the others wait in the reduction below */
    fprintf(stderr, "train: rank %d: --profile: out of memory; ending the job\n", me);
    t->comm->abort(t->comm, 1);
  }
  double steps = (double)t->prof_steps;
  row[PROF_STAGE] = t->mesh.pp_rank, row[PROF_DP] = t->mesh.dp_rank, row[PROF_TP] = t->mesh.tp_rank;
  row[PROF_STEP] = t->prof_ms / steps, row[PROF_PLAN] = t->prog->s->plan_compute_s * 1e3;
  for (int op = 0; op < ISA_NOPS; op++) row[PROF_OPS + op] = t->prof.ms[op] / steps;
  if (n > 1) t->comm->host_all_reduce(t->comm, all, n * PROF_ROW, COMM_SUM);
  if (me != 0) return free(all);
  int shown[ISA_NOPS], ns = 0;
  for (int op = 0; op < ISA_NOPS; op++) {
    int any = 0;
    for (int r = 0; r < n; r++) any |= all[(size_t)r * PROF_ROW + PROF_OPS + op] > 0;
    if (any) shown[ns++] = op;
  }
  fflush(stdout);
  printf("profile: ms per step over %" PRId64 " steps (the first not counted), each instruction until the device "
         "finished it\n%5s %5s %4s %4s %9s",
         t->prof_steps, "rank", "stage", "dp", "tp", "step");
  for (int k = 0; k < ns; k++) printf(" %11s", isa_op_names[shown[k]]);
  printf(" %9s %9s %9s\n", "outside", "compute", "planned");
  if (t->log)
    fprintf(t->log, "{\"step\": %" PRId64 ", \"profile\": {\"steps\": %" PRId64 ", \"ranks\": [", t->step,
            t->prof_steps);
  for (int r = 0; r < n; r++) {
    const double *v = all + (size_t)r * PROF_ROW;
    double outside = v[PROF_STEP], compute = v[PROF_OPS + ISA_KERNEL] + v[PROF_OPS + ISA_GEMM] + v[PROF_OPS + ISA_ZERO];
    printf("%5d %5.0f %4.0f %4.0f %9.2f", r, v[PROF_STAGE], v[PROF_DP], v[PROF_TP], v[PROF_STEP]);
    for (int k = 0; k < ns; k++) printf(" %11.2f", v[PROF_OPS + shown[k]]), outside -= v[PROF_OPS + shown[k]];
    printf(" %9.2f %9.2f", outside, compute);
    if (v[PROF_PLAN] > 0) printf(" %9.2f\n", v[PROF_PLAN]);
    else printf(" %9s\n", "-");
    if (!t->log) continue;
    fprintf(t->log, "%s{\"rank\": %d, \"stage\": %.0f, \"dp\": %.0f, \"tp\": %.0f, \"step_ms\": %.4f, \"ms\": {",
            r ? ", " : "", r, v[PROF_STAGE], v[PROF_DP], v[PROF_TP], v[PROF_STEP]);
    for (int k = 0; k < ns; k++)
      fprintf(t->log, "%s\"%s\": %.4f", k ? ", " : "", isa_op_names[shown[k]], v[PROF_OPS + shown[k]]);
    fprintf(t->log, "}, \"outside_ms\": %.4f, \"compute_ms\": %.4f", outside, compute);
    json_num(t->log, "planned_compute_ms", v[PROF_PLAN] > 0 ? v[PROF_PLAN] : NAN, "%.4f");
    fputc('}', t->log);
  }
  if (t->log) fputs("]}}\n", t->log), fflush(t->log);
  fflush(stdout);
  free(all);
}

int trainer_finish(Trainer *t, char *err, size_t errlen) {
  const TrainOpts *o = t->opts;
  trainer_peak_report(t);
  if (o->profile) trainer_profile_report(t);
  zero_gather_params(&t->zero, &t->ex);
  /* an offload program's parameters are at their homes: read them all first (ZeRO-3:
   * only to save them, there are no replicas to compare) */
  int bad = t->ex.off && (t->zero.stage != 3 || trainer_saves_params(o)) && trainer_host_pull(t, err, errlen) != 0;
  if (comm_agree(t->comm, bad, err) != 0) return -1;
  bad = zero_check_replicas(&t->zero, &t->ex, t->ex.off ? t->host[TIER_PARAMS] : NULL, err, errlen) !=
        0; /* within each dp group */
  if (comm_agree(t->comm, bad, err) != 0) return -1;
  char parts[4200] = "";
  if (trainer_saves_params(o)) {
    const char *target = o->save ? o->save : o->save_hf;
    size_t n = strlen(target);
    while (n > 1 && target[n - 1] == '/') n--;
    snprintf(parts, sizeof parts, "%.*s.parts", (int)n, target);
    bad = !t->ex.off && trainer_host_pull(t, err, errlen) != 0;
    if (comm_agree(t->comm, bad, err) != 0 || trainer_write_parts(t, parts, err, errlen) != 0) {
      if (t->comm->rank == 0) file_remove_dir(parts);
      return -1;
    }
  }
  if (t->ex.off) trainer_offload_report(t);
  int rc = t->comm->rank == 0 ? trainer_finish_rank0(t, parts[0] ? parts : NULL, err, errlen) : 0;
  if (parts[0] && t->comm->rank == 0) file_remove_dir(parts);
  return comm_agree(t->comm, rc != 0, err);
}
