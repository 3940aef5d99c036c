/* offload: locations, the copy thread and the plan checks (see the header). A part
 * is chunk c's params, grads or opt (item c * PART_COUNT + part); `where` holds, per
 * item, one bit per location holding it (1 << IsaLoc). The copy thread owns `where`,
 * the NVMe page counts and the statistics while jobs are queued; the main thread
 * reads them only once the queue is empty (done == issued, seen under the mutex).
 */
/* fallocate needs _GNU_SOURCE, which the build defines */
#include "runtime/offload.h"

#include "runtime/io/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { OFF_BLOCK = 1 << 20 }; /* bytes of zeros written to NVMe per call */
_Static_assert((int)OFFLOAD_QUEUE < (int)DEVICE_MARKS, "a queued job's mark must outlive it");
enum { OFF_MSG = 1024 };

typedef struct OffJob {
  int drop; /* a drop (at = from), else a move */
  int chunk, part;
  IsaLoc from, to;
  int keep;
  const char *list; /* "step", ... or the runtime's reason */
  int index;        /* in the list, -1 for the runtime's own jobs */
  uint64_t mark;    /* a device without a host view: the compute work queued before
                       the job (Device.mark), which the copy thread awaits first */
} OffJob;

struct Offload {
  Executor *ex;
  const Prog *p;
  Executor host; /* the host location: PARAMS, GRADS, OPT (WORK never committed) */
  int host_ready;
  const char *nvme_dir;
  int fd[PART_COUNT]; /* NVMe file per tier, -1 when none */
  char *path[PART_COUNT];
  uint32_t *nv[PART_COUNT]; /* parts holding each NVMe page of the tier */
  int64_t nv_bytes;         /* NVMe pages held, bytes */
  int64_t granule;
  int rank;             /* the dp rank: which chunks it holds (ProgChunk.owner) */
  int64_t dev_base;     /* WORK (and staging) on the device, granules */
  unsigned char *where; /* [nchunks * PART_COUNT] */
  uint64_t *last;       /* [nchunks * PART_COUNT] queue position after the part's last job */
  char *zeros;          /* [OFF_BLOCK] */
  Device *xdev;         /* the device, whose memory the copy thread reaches through
                           its copy stream (Device.xfer) */
  char *stage;          /* [OFF_BLOCK] host bytes between the device and NVMe */
  char *host_work;      /* [host_work_bytes] "on": "host" kernels' WORK buffers when
                           the host runs them apart from the device (offload_host_work) */
  int64_t host_work_bytes;
  OffJob ring[OFFLOAD_QUEUE];
  uint64_t issued, taken, done;
  pthread_mutex_t mu;
  pthread_cond_t work, progress;
  pthread_t thread;
  int running, stop, failed;
  char msg[OFF_MSG];
  OffloadStats st;
};

static unsigned loc_bit(IsaLoc l) { return 1u << l; }

/* ---- bytes in use -------------------------------------------------------------- */

static int64_t device_in_use(const Offload *o) {
  return o->dev_base + o->ex->committed[TIER_PARAMS] + o->ex->committed[TIER_GRADS] + o->ex->committed[TIER_OPT];
}

static int64_t host_in_use(const Offload *o) {
  return o->host.committed[TIER_PARAMS] + o->host.committed[TIER_GRADS] + o->host.committed[TIER_OPT];
}

static void note_peaks(Offload *o) {
  int64_t now[3] = {device_in_use(o), host_in_use(o), o->nv_bytes};
  for (int k = 0; k < 3; k++) o->st.peak[k] = now[k] > o->st.peak[k] ? now[k] : o->st.peak[k];
}

/* ---- NVMe files ---------------------------------------------------------------- */

static int nv_error(Offload *o, char *msg, const char *verb, int t, int64_t off, int64_t n, const char *why) {
  return file_set_error(msg, OFF_MSG, "--nvme-dir %s: %s %s at offset %" PRId64 " (%" PRId64 " bytes): %s", o->nvme_dir,
                        verb, o->path[t], off, n, why);
}

static int nv_write(Offload *o, int t, const char *src, int64_t off, int64_t n, char *msg) {
  for (int64_t done = 0; done < n;) {
    ssize_t w = pwrite(o->fd[t], src + done, (size_t)(n - done), (off_t)(off + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return nv_error(o, msg, "writing", t, off + done, n - done, w < 0 ? strerror(errno) : "nothing written");
    done += w;
  }
  return 0;
}

static int nv_read(Offload *o, int t, char *dst, int64_t off, int64_t n, char *msg) {
  for (int64_t done = 0; done < n;) {
    ssize_t r = pread(o->fd[t], dst + done, (size_t)(n - done), (off_t)(off + done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      return nv_error(o, msg, "reading", t, off + done, n - done, r < 0 ? strerror(errno) : "unexpected end of file");
    done += r;
  }
  return 0;
}

static int nv_zero(Offload *o, int t, int64_t off, int64_t n, char *msg) {
  for (int64_t done = 0; done < n; done += OFF_BLOCK) {
    int64_t k = n - done < OFF_BLOCK ? n - done : OFF_BLOCK;
    if (nv_write(o, t, o->zeros, off + done, k, msg) != 0) return -1;
  }
  return 0;
}

/* Pages of [off, off+n) now held by one more (hold 1) or one fewer part; pages no
 * part holds any more go back to the file system where it can punch holes. */
static void nv_count(Offload *o, int t, int64_t off, int64_t n, int hold) {
  int64_t g = o->granule, g0 = off / g, g1 = (off + n + g - 1) / g;
  for (int64_t i = g0; i < g1; i++) {
    if (hold) o->nv_bytes += o->nv[t][i]++ == 0 ? g : 0;
    else o->nv_bytes -= --o->nv[t][i] == 0 ? g : 0;
  }
  for (int64_t i = g0, j; !hold && i < g1; i = j + 1) {
    for (j = i; j < g1 && o->nv[t][j] == 0; j++)
      ;
    if (j > i) /* best effort: a file system without holes keeps the blocks */
      (void)fallocate(o->fd[t], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, i * g, (j - i) * g);
  }
}

/* ---- memory at a location -------------------------------------------------------- */

/* The host location's bytes of tier t. */
static char *host_base(Offload *o, int t) { return o->host.tiers[t]; }

/* Job description for messages: "update[3] (move chunk 1 opt nvme -> host)". */
static void job_text(const OffJob *j, char *buf, size_t len) {
  char at[48] = "";
  if (j->index >= 0) snprintf(at, sizeof at, "[%d]", j->index);
  if (j->drop)
    snprintf(buf, len, "%s%s (drop chunk %d %s at %s)", j->list ? j->list : "?", at, j->chunk, isa_part_names[j->part],
             isa_loc_names[j->from]);
  else
    snprintf(buf, len, "%s%s (move chunk %d %s %s -> %s%s)", j->list ? j->list : "?", at, j->chunk,
             isa_part_names[j->part], isa_loc_names[j->from], isa_loc_names[j->to], j->keep ? ", keep" : "");
}

static int plan_error(const OffJob *j, char *msg, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int plan_error(const OffJob *j, char *msg, const char *fmt, ...) {
  char what[256], why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  job_text(j, what, sizeof what);
  return file_set_error(msg, OFF_MSG, "internal error: offload: %s: %s", what, why);
}

/* Memory behind [off, off+n) of tier t at l; the device's counted against the capacity. */
static int commit_at(Offload *o, const OffJob *j, IsaLoc l, int t, int64_t off, int64_t n, char *msg) {
  char err[256];
  if (l == LOC_NVME) {
    nv_count(o, t, off, n, 1);
    return 0;
  }
  if (l == LOC_DEVICE) {
    int64_t more = exec_uncommitted(o->ex, t, off, n), now = device_in_use(o);
    if (now + more > o->st.capacity)
      return plan_error(j, msg,
                        "the device would hold %" PRId64 " bytes (%.2f MiB), above "
                        "the plan's device_capacity of %" PRId64 " bytes",
                        now + more, (double)(now + more) / (1 << 20), o->st.capacity);
  }
  if (exec_commit(l == LOC_DEVICE ? o->ex : &o->host, t, off, n, err, sizeof err) != 0)
    return file_set_error(msg, OFF_MSG, "offload: %s memory: %s", isa_loc_names[l], err);
  return 0;
}

static void release_at(Offload *o, IsaLoc l, int t, int64_t off, int64_t n) {
  if (l == LOC_NVME) nv_count(o, t, off, n, 0);
  else exec_decommit_idle(l == LOC_DEVICE ? o->ex : &o->host, t, off, n); /* after the job's mark */
}

/* The device location's bytes [off, off+n) of tier t <-> host memory at buf, on the
 * device's copy stream. */
static void dev_put(Offload *o, int t, int64_t off, const char *buf, int64_t n) {
  o->xdev->xfer(o->xdev, XFER_IN, o->ex->tiers[t] + off, buf, n);
}

static void dev_get(Offload *o, int t, int64_t off, char *buf, int64_t n) {
  o->xdev->xfer(o->xdev, XFER_OUT, buf, o->ex->tiers[t] + off, n);
}

/* NVMe <-> the device, in blocks staged in host memory. */
static int dev_nvme(Offload *o, int to_dev, int t, int64_t off, int64_t n, char *msg) {
  for (int64_t done = 0; done < n; done += OFF_BLOCK) {
    int64_t k = n - done < OFF_BLOCK ? n - done : OFF_BLOCK;
    if (to_dev && nv_read(o, t, o->stage, off + done, k, msg) != 0) return -1;
    if (to_dev) dev_put(o, t, off + done, o->stage, k);
    else dev_get(o, t, off + done, o->stage, k);
    if (!to_dev && nv_write(o, t, o->stage, off + done, k, msg) != 0) return -1;
  }
  return 0;
}

/* The bytes of [off, off+n) of tier t from `from` (or zeros) to `to`. */
static int copy_range(Offload *o, IsaLoc from, IsaLoc to, int t, int64_t off, int64_t n, char *msg) {
  if (from == LOC_ZERO && to == LOC_NVME) return nv_zero(o, t, off, n, msg);
  if (from == LOC_ZERO && to == LOC_DEVICE) {
    o->xdev->xfer(o->xdev, XFER_ZERO, o->ex->tiers[t] + off, NULL, n);
    return 0;
  }
  if (from == LOC_ZERO) {
    memset(host_base(o, t) + off, 0, (size_t)n);
    return 0;
  }
  if (from == LOC_DEVICE || to == LOC_DEVICE) {
    IsaLoc other = from == LOC_DEVICE ? to : from;
    if (other == LOC_NVME) return dev_nvme(o, to == LOC_DEVICE, t, off, n, msg);
    /* within one pinned block of the host location at a time (device_cpu_pin_through):
     * DMA from and to one registration */
    for (int64_t at = off, next; at < off + n; at = next) {
      next = (at / CPU_PIN_BLOCK + 1) * CPU_PIN_BLOCK;
      next = next < off + n ? next : off + n;
      if (to == LOC_DEVICE) dev_put(o, t, at, host_base(o, t) + at, next - at);
      else dev_get(o, t, at, host_base(o, t) + at, next - at);
    }
    return 0;
  }
  /* host <-> NVMe */
  if (from == LOC_NVME) return nv_read(o, t, host_base(o, t) + off, off, n, msg);
  return nv_write(o, t, host_base(o, t) + off, off, n, msg);
}

/* ---- jobs ------------------------------------------------------------------------ */

static int run_move(Offload *o, const OffJob *j, char *msg) {
  unsigned char *w = &o->where[j->chunk * PART_COUNT + j->part];
  int64_t off[2], n = o->p->chunks[j->chunk].end - o->p->chunks[j->chunk].start;
  int nr = prog_part_ranges(o->p, &o->p->chunks[j->chunk], j->part, off);
  if (j->from != LOC_ZERO && !(*w & loc_bit(j->from)))
    return plan_error(j, msg, "the part is not at %s", isa_loc_names[j->from]);
  if (*w & loc_bit(j->to)) return plan_error(j, msg, "the part is already at %s", isa_loc_names[j->to]);
  for (int k = 0; k < nr; k++)
    if (commit_at(o, j, j->to, j->part, off[k], n, msg) != 0) return -1;
  *w |= (unsigned char)loc_bit(j->to);
  note_peaks(o);
  for (int k = 0; k < nr; k++)
    if (copy_range(o, j->from, j->to, j->part, off[k], n, msg) != 0) {
      char what[256];
      size_t len = strlen(msg);
      job_text(j, what, sizeof what);
      snprintf(msg + len, OFF_MSG - len, " (%s)", what);
      return -1;
    }
  *(j->index >= 0 ? &o->st.moved : &o->st.moved_runtime) += j->from == LOC_ZERO ? 0 : nr * n;
  o->st.moves++;
  if (j->keep || j->from == LOC_ZERO) return 0;
  for (int k = 0; k < nr; k++) release_at(o, j->from, j->part, off[k], n);
  *w &= (unsigned char)~loc_bit(j->from);
  return 0;
}

static int run_drop(Offload *o, const OffJob *j, char *msg) {
  unsigned char *w = &o->where[j->chunk * PART_COUNT + j->part];
  int64_t off[2], n = o->p->chunks[j->chunk].end - o->p->chunks[j->chunk].start;
  int nr = prog_part_ranges(o->p, &o->p->chunks[j->chunk], j->part, off);
  if (!(*w & loc_bit(j->from))) return plan_error(j, msg, "the part is not at %s", isa_loc_names[j->from]);
  for (int k = 0; k < nr; k++) release_at(o, j->from, j->part, off[k], n);
  *w &= (unsigned char)~loc_bit(j->from);
  o->st.drops++;
  return 0;
}

static void *copy_main(void *arg) {
  Offload *o = arg;
  char msg[OFF_MSG];
  pthread_mutex_lock(&o->mu);
  for (;;) {
    while (o->taken == o->issued && !o->stop) pthread_cond_wait(&o->work, &o->mu);
    if (o->taken == o->issued) break;
    OffJob j = o->ring[o->taken++ % OFFLOAD_QUEUE];
    int skip = o->failed;
    pthread_mutex_unlock(&o->mu);
    if (!skip) /* the kernels queued before the job are done */
      o->xdev->await(o->xdev, j.mark);
    int rc = skip ? 0 : j.drop ? run_drop(o, &j, msg) : run_move(o, &j, msg);
    pthread_mutex_lock(&o->mu);
    if (rc != 0 && !o->failed) {
      o->failed = 1;
      snprintf(o->msg, sizeof o->msg, "%s", msg);
    }
    o->done++;
    pthread_cond_broadcast(&o->progress);
  }
  pthread_mutex_unlock(&o->mu);
  return NULL;
}

static void off_queue(Offload *o, const OffJob *j) {
  pthread_mutex_lock(&o->mu);
  while (o->issued - o->done >= OFFLOAD_QUEUE) pthread_cond_wait(&o->progress, &o->mu);
  o->ring[o->issued % OFFLOAD_QUEUE] = *j;
  /* at most OFFLOAD_QUEUE < DEVICE_MARKS marks are outstanding */
  o->ring[o->issued % OFFLOAD_QUEUE].mark = o->xdev->mark(o->xdev);
  o->issued++;
  o->last[j->chunk * PART_COUNT + j->part] = o->issued;
  pthread_cond_signal(&o->work);
  pthread_mutex_unlock(&o->mu);
}

void offload_issue(Offload *o, const IsaInstr *in, const char *list, int index) {
  const IsaMove *m = &in->move;
  OffJob j = {in->op == ISA_DROP, m->chunk, m->part, m->from, m->to, m->keep, list, index, 0};
  off_queue(o, &j);
}

/* Blocks until done reaches upto; the time counts as waiting. 0, or -1 after a failure. */
static int off_wait_for(Offload *o, uint64_t upto) {
  pthread_mutex_lock(&o->mu);
  if (o->done < upto) {
    double t0 = exec_now_ms();
    while (o->done < upto) pthread_cond_wait(&o->progress, &o->mu);
    o->st.wait_ms += exec_now_ms() - t0;
  }
  int rc = o->failed ? -1 : 0;
  pthread_mutex_unlock(&o->mu);
  return rc;
}

int offload_wait(Offload *o, int chunk, int part) {
  pthread_mutex_lock(&o->mu);
  uint64_t upto = o->last[chunk * PART_COUNT + part];
  pthread_mutex_unlock(&o->mu);
  return off_wait_for(o, upto);
}

void offload_fail(Offload *o, const char *msg) {
  pthread_mutex_lock(&o->mu);
  if (!o->failed) o->failed = 1, snprintf(o->msg, sizeof o->msg, "%s", msg);
  pthread_mutex_unlock(&o->mu);
}

int offload_failed(Offload *o) {
  pthread_mutex_lock(&o->mu);
  int f = o->failed;
  pthread_mutex_unlock(&o->mu);
  return f;
}

Device *offload_host_device(Offload *o) { return o->host.dev; }

char *offload_host_work(Offload *o, int64_t *bytes) {
  *bytes = o->host_work_bytes;
  return o->host_work;
}

char *offload_host_tier(Offload *o, int t) { return o->host.tiers[t]; }

int offload_drain(Offload *o, char *err, size_t errlen) {
  pthread_mutex_lock(&o->mu);
  uint64_t upto = o->issued;
  pthread_mutex_unlock(&o->mu);
  if (off_wait_for(o, upto) == 0) return 0;
  return file_set_error(err, errlen, "%s", o->msg);
}

/* ---- between steps --------------------------------------------------------------- */

/* Whether this rank holds chunk c between steps (ZeRO-3: it owns it). */
static int held(const Offload *o, int c) { return o->p->chunks[c].owner < 0 || o->p->chunks[c].owner == o->rank; }

static unsigned home_bits(const Offload *o, int c, int part) {
  IsaLoc h = o->p->chunks[c].home[part];
  return h == LOC_NONE || !held(o, c) ? 0 : loc_bit(h);
}

/* Jobs that leave part (c, part) at home only; -1 when its data is nowhere. */
static int queue_home(Offload *o, int c, int part, const char *why) {
  unsigned w = o->where[c * PART_COUNT + part], home = home_bits(o, c, part);
  OffJob j = {0, c, part, LOC_DEVICE, LOC_DEVICE, 0, why, -1, 0};
  if (home && !(w & home)) {
    if (!w) return -1;
    for (int l = LOC_DEVICE; !(w & loc_bit((IsaLoc)l)); l++) j.from = (IsaLoc)(l + 1);
    j.to = o->p->chunks[c].home[part];
    off_queue(o, &j);
    w = (w & ~loc_bit(j.from)) | home;
  }
  j.drop = 1;
  for (int l = LOC_DEVICE; l <= LOC_NVME; l++)
    if (w & loc_bit((IsaLoc)l) & ~home) {
      j.from = (IsaLoc)l;
      off_queue(o, &j);
    }
  return 0;
}

int offload_home(Offload *o, const char *why, char *err, size_t errlen) {
  if (offload_drain(o, err, errlen) != 0) return -1;
  for (int c = 0; c < o->p->s->nchunks; c++)
    for (int part = 0; part < PART_COUNT; part++)
      if (queue_home(o, c, part, why) != 0)
        return file_set_error(err, errlen,
                              "internal error: offload: %s: chunk %d's %s "
                              "is nowhere (its data was dropped)",
                              why, c, isa_part_names[part]);
  return offload_drain(o, err, errlen);
}

int offload_params_to_device(Offload *o, char *err, size_t errlen) {
  if (offload_drain(o, err, errlen) != 0) return -1;
  for (int c = 0; c < o->p->s->nchunks; c++) {
    OffJob j = {0, c, TIER_PARAMS, o->p->chunks[c].home[TIER_PARAMS], LOC_DEVICE, 1, "sampling", -1, 0};
    if (held(o, c) && !(o->where[c * PART_COUNT + TIER_PARAMS] & loc_bit(LOC_DEVICE))) off_queue(o, &j);
  }
  return offload_drain(o, err, errlen);
}

int64_t offload_sample_bytes(const Offload *o) {
  int64_t g = o->granule;
  return o->dev_base + (o->p->s->tiers[TIER_PARAMS] + g - 1) / g * g;
}

/* Part ranges of every chunk's params (to_opt 0) or opt at home <-> buf. */
static int state_io(Offload *o, int part, char *buf, int to_home, char *err, size_t errlen) {
  char msg[OFF_MSG];
  for (int c = 0; c < o->p->s->nchunks; c++) {
    IsaLoc h = o->p->chunks[c].home[part];
    int64_t off[2], n = o->p->chunks[c].end - o->p->chunks[c].start;
    int nr = prog_part_ranges(o->p, &o->p->chunks[c], part, off);
    for (int k = 0; k < nr; k++) {
      int rc = 0;
      if (!held(o, c)) continue;
      if (h == LOC_NVME)
        rc = to_home ? nv_write(o, part, buf + off[k], off[k], n, msg) : nv_read(o, part, buf + off[k], off[k], n, msg);
      else if (h == LOC_DEVICE && to_home) dev_put(o, part, off[k], buf + off[k], n);
      else if (h == LOC_DEVICE) dev_get(o, part, off[k], buf + off[k], n);
      else if (to_home) memcpy(host_base(o, part) + off[k], buf + off[k], (size_t)n);
      else memcpy(buf + off[k], host_base(o, part) + off[k], (size_t)n);
      if (rc != 0) return file_set_error(err, errlen, "%s", msg);
    }
  }
  return 0;
}

int offload_pull(Offload *o, char *params, char *opt, char *err, size_t errlen) {
  if (offload_drain(o, err, errlen) != 0) return -1;
  return state_io(o, TIER_PARAMS, params, 0, err, errlen) || (opt && state_io(o, TIER_OPT, opt, 0, err, errlen)) ? -1
                                                                                                                 : 0;
}

int offload_push(Offload *o, const char *params, const char *opt, char *err, size_t errlen) {
  if (offload_drain(o, err, errlen) != 0) return -1;
  return state_io(o, TIER_PARAMS, (char *)params, 1, err, errlen) || state_io(o, TIER_OPT, (char *)opt, 1, err, errlen)
             ? -1
             : 0;
}

void offload_stats(Offload *o, OffloadStats *s) {
  pthread_mutex_lock(&o->mu);
  *s = o->st;
  pthread_mutex_unlock(&o->mu);
}

const char *offload_nvme_dir(const Offload *o) { return o->nvme_dir; }

/* ---- set-up ---------------------------------------------------------------------- */

static int open_nvme(Offload *o, const char *dir, char *err, size_t errlen) {
  struct stat sb;
  if (stat(dir, &sb) != 0) return file_set_error(err, errlen, "--nvme-dir %s: %s", dir, strerror(errno));
  if (!S_ISDIR(sb.st_mode)) return file_set_error(err, errlen, "--nvme-dir %s: not a directory", dir);
  for (int t = 0; t < PART_COUNT; t++) {
    int64_t pages = (o->p->s->tiers[t] + o->granule - 1) / o->granule;
    if (asprintf(&o->path[t], "%s/colossalc-%ld-%s.nvme", dir, (long)getpid(), isa_part_names[t]) < 0) {
      o->path[t] = NULL;
      return file_set_error(err, errlen, "out of memory");
    }
    o->fd[t] = open(o->path[t], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (o->fd[t] < 0)
      return file_set_error(err, errlen, "--nvme-dir %s: cannot create %s: %s", dir, o->path[t], strerror(errno));
    if (!(o->nv[t] = calloc((size_t)pages + 1, sizeof *o->nv[t]))) return file_set_error(err, errlen, "out of memory");
  }
  o->nvme_dir = dir;
  return 0;
}

/* Every part committed (counted) at its home; grads nowhere. */
static int place_homes(Offload *o, char *err, size_t errlen) {
  char msg[OFF_MSG];
  for (int c = 0; c < o->p->s->nchunks; c++)
    for (int part = 0; part < PART_COUNT; part++) {
      IsaLoc h = o->p->chunks[c].home[part];
      OffJob j = {0, c, part, LOC_ZERO, h, 0, "start-up", -1, 0};
      int64_t off[2], n = o->p->chunks[c].end - o->p->chunks[c].start;
      int nr = prog_part_ranges(o->p, &o->p->chunks[c], part, off);
      for (int k = 0; h != LOC_NONE && held(o, c) && k < nr; k++)
        if (commit_at(o, &j, h, part, off[k], n, msg) != 0) return file_set_error(err, errlen, "%s", msg);
      o->where[c * PART_COUNT + part] = (unsigned char)home_bits(o, c, part);
    }
  note_peaks(o);
  return 0;
}

static int offload_setup(Offload *o, Device *host_dev, const char *nvme_dir, char *err, size_t errlen) {
  const Prog *p = o->p;
  size_t items = (size_t)p->s->nchunks * PART_COUNT;
  for (int t = TIER_PARAMS; t <= TIER_OPT; t++)
    if (p->s->tiers[t] > 0 && !exec_reserved(o->ex, t))
      return file_set_error(err, errlen,
                            "offload: the %s device cannot reserve address "
                            "space for the %s tier",
                            o->ex->dev->name, isa_part_names[t]);
  Device *d = o->ex->dev;
  if (!(d->xfer && d->mark && d->await))
    return file_set_error(err, errlen,
                          "offload: the %s device has no copy stream, which the "
                          "copy thread needs",
                          d->name);
  o->xdev = d;
  if (!(o->stage = exec_host_alloc(d, OFF_BLOCK))) /* pinned on a GPU: its copies are DMA */
    return file_set_error(err, errlen, "out of memory");
  if (host_dev != d && !exec_host_tier(o->ex, TIER_PARAMS)) {
    o->host_work_bytes = p->s->host_work;
    if (!(o->host_work = exec_host_alloc(d, o->host_work_bytes + 1)))
      return file_set_error(err, errlen, "out of memory");
  }
  if (p->s->nvme && !nvme_dir)
    return file_set_error(err, errlen,
                          "this program keeps parameters or optimizer state on "
                          "NVMe (its offload plan): give --nvme-dir DIR, a directory on a "
                          "fast disk with room for them");
  if (exec_init_reserved(&o->host, p, host_dev, (1u << TIERS) - 1, err, errlen) != 0) return -1;
  o->host_ready = 1;
  o->where = calloc(items, 1);
  o->last = calloc(items, sizeof *o->last);
  o->zeros = calloc(1, OFF_BLOCK);
  if (!o->where || !o->last || !o->zeros) return file_set_error(err, errlen, "out of memory");
  if (nvme_dir && p->s->nvme && open_nvme(o, nvme_dir, err, errlen) != 0) return -1;
  return place_homes(o, err, errlen);
}

int offload_init(Executor *ex, Device *host_dev, const char *nvme_dir, int dp_rank, char *err, size_t errlen) {
  Offload *o = calloc(1, sizeof *o);
  if (!o) return file_set_error(err, errlen, "out of memory");
  int64_t g = ex->dev->granule > 0 ? ex->dev->granule : 64;
  o->ex = ex, o->p = ex->prog, o->granule = g, o->rank = dp_rank;
  o->st.capacity = ex->prog->s->capacity;
  o->dev_base = (exec_tier_bytes(ex, TIER_WORK) + g - 1) / g * g + (ex->prog->s->staging + g - 1) / g * g;
  for (int t = 0; t < PART_COUNT; t++) o->fd[t] = -1;
  pthread_mutex_init(&o->mu, NULL);
  pthread_cond_init(&o->work, NULL);
  pthread_cond_init(&o->progress, NULL);
  ex->off = o;
  if (offload_setup(o, host_dev, nvme_dir, err, errlen) != 0) return -1; /* exec_free frees o */
  if (pthread_create(&o->thread, NULL, copy_main, o) != 0)
    return file_set_error(err, errlen, "offload: cannot start the copy thread");
  o->running = 1;
  return 0;
}

void offload_free(Offload *o) {
  if (!o) return;
  if (o->running) {
    pthread_mutex_lock(&o->mu);
    o->stop = 1;
    pthread_cond_signal(&o->work);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL);
  }
  if (o->host_ready) exec_free(&o->host);
  for (int t = 0; t < PART_COUNT; t++) {
    if (o->fd[t] >= 0) {
      close(o->fd[t]);
      unlink(o->path[t]);
    }
    free(o->path[t]);
    free(o->nv[t]);
  }
  free(o->where), free(o->last), free(o->zeros);
  exec_host_free(o->ex->dev, o->stage); /* both the device's (offload_setup) */
  exec_host_free(o->ex->dev, o->host_work);
  pthread_cond_destroy(&o->work);
  pthread_cond_destroy(&o->progress);
  pthread_mutex_destroy(&o->mu);
  free(o);
}
