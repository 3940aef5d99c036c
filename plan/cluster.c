/* Cluster profiles and cluster files. Each built-in profile is one row of published
 * figures (the datasheet of each is named in docs/plan.md) plus the efficiency
 * factors the cost model applies to them; a cluster file (JSON, read with cJSON)
 * either starts from a profile ("base") and overrides some fields, or gives every
 * field. Every figure is checked: a bad one is a user error that names it. */
#include "plan/cluster.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "ir/diag.h"
#include "plan/cost.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define T12 1e12
#define G9 1e9
#define US 1e-6

/* A node's NVMe drives, for offload: one PCIe 4.0 x4 data-centre drive's sequential
 * rate (about 7 GB/s read, 3.5-5 GB/s write; the slower), where a profile says nothing
 * else, with 3.84 TB of it. The DGX profiles have eight such U.2 drives in RAID 0
 * (DGX A100 datasheet: 8 x 3.84 TB = 30 TB of internal storage; DGX H100/H200: 8 x 3.84
 * TB): 8 x 3.5 GB/s written. */
#define NVME_BW (5 * G9)
#define NVME_TB 3.84e12
#define DGX_NVME_BW (8 * 3.5 * G9)
#define DGX_NVME (8 * NVME_TB)

/* host_mem_bw: the node's CPU memory bandwidth, channels x transfer rate x 8 bytes:
 * DGX A100, 2 AMD EPYC 7742 with 8 channels of DDR4-3200 each; DGX H100 and H200, 2 Intel
 * Xeon Platinum 8480C with 8 channels of DDR5-4800 each; an RTX 3090 workstation, 2
 * channels of DDR4-3200; the cpu profile, one EPYC 7763 socket (8 channels, DDR4-3200). */
typedef struct Profile {
  DeviceSpec dev;
  LinkSpec intra, inter;
  double host_memory, host_link_bw;
  int node;
  double host_mem_bw, nvme_bw, nvme;
} Profile;

/* dev: name, part, bf16, fp16, fp32, memory, memory_bw, reserved, gemm_eff, attn_eff, mem_eff, kernel_overhead,
 * fp32_only, fp8 (dense, NVIDIA's H100 and H200 datasheets: 1,979 TFLOP/s, twice bf16's), gemm_half_dim,
 * shares_host, commit_bw (0: not measured, commits priced as free) */
static const Profile profiles[] = {
    {{"a100-80g", "NVIDIA A100 SXM4 80GB", 312 * T12, 312 * T12, 19.5 * T12, 80 * GIB, 2039 * G9, 3 * GIB, 0.7, 0.55,
      0.8, 4 * US, false, 0, 128, false, 0},
     {"NVLink 3 + NVSwitch (12 links)", 300 * G9, 2 * US, 0.8},
     {"8x HDR InfiniBand 200 Gb/s per node", 200 * G9, 5 * US, 0.85},
     2e12,
     32 * G9,
     8,
     409.6 * G9,
     DGX_NVME_BW,
     DGX_NVME},
    {{"a100-40g", "NVIDIA A100 SXM4 40GB", 312 * T12, 312 * T12, 19.5 * T12, 40 * GIB, 1555 * G9, 2 * GIB, 0.7, 0.55,
      0.8, 4 * US, false, 0, 128, false, 0},
     {"NVLink 3 + NVSwitch (12 links)", 300 * G9, 2 * US, 0.8},
     {"8x HDR InfiniBand 200 Gb/s per node", 200 * G9, 5 * US, 0.85},
     1e12,
     32 * G9,
     8,
     409.6 * G9,
     DGX_NVME_BW,
     DGX_NVME / 2},
    {{"h100-sxm", "NVIDIA H100 SXM5 80GB", 989 * T12, 989 * T12, 67 * T12, 80 * GIB, 3350 * G9, 3 * GIB, 0.65, 0.5, 0.8,
      4 * US, false, 1979 * T12, 128, false, 0},
     {"NVLink 4 + NVSwitch (18 links)", 450 * G9, 2 * US, 0.8},
     {"8x NDR InfiniBand 400 Gb/s per node", 400 * G9, 5 * US, 0.85},
     2e12,
     64 * G9,
     8,
     614.4 * G9,
     DGX_NVME_BW,
     DGX_NVME},
    {{"h200", "NVIDIA H200 SXM 141GB", 989 * T12, 989 * T12, 67 * T12, 141e9, 4800 * G9, 3 * GIB, 0.65, 0.5, 0.8,
      4 * US, false, 1979 * T12, 128, false, 0},
     {"NVLink 4 + NVSwitch (18 links)", 450 * G9, 2 * US, 0.8},
     {"8x NDR InfiniBand 400 Gb/s per node", 400 * G9, 5 * US, 0.85},
     2e12,
     64 * G9,
     8,
     614.4 * G9,
     DGX_NVME_BW,
     DGX_NVME},
    {{"rtx3090", "NVIDIA GeForce RTX 3090", 71 * T12, 71 * T12, 35.6 * T12, 24 * GIB, 936 * G9, 1.5 * GIB, 0.75, 0.5,
      0.8, 5 * US, false, 0, 128, false, 0},
     {"PCIe 4.0 x16 peer-to-peer", 32 * G9, 10 * US, 0.75},
     {"100 Gb/s Ethernet per node", 12.5 * G9, 15 * US, 0.8},
     128 * GIB,
     32 * G9,
     4,
     51.2 * G9,
     NVME_BW,
     NVME_TB},
    {{"cpu", "AMD EPYC 7763 socket (64 cores)", 5.0176 * T12, 5.0176 * T12, 5.0176 * T12, 256 * GIB, 204.8 * G9,
      1 * GIB, 0.7, 0.4, 0.7, 2 * US, true, 0, 128, false, 0},
     {"socket-to-socket shared memory (MPI)", 50 * G9, 1 * US, 0.6},
     {"100 Gb/s Ethernet per node", 12.5 * G9, 10 * US, 0.8},
     512 * GIB,
     204.8 * G9,
     2,
     204.8 * G9,
     NVME_BW,
     NVME_TB},
};
enum { NPROFILES = sizeof profiles / sizeof profiles[0] };

const char *const cluster_profile_names[] = {"a100-80g", "a100-40g", "h100-sxm", "h200", "rtx3090", "cpu", NULL};

static const Profile *find_profile(const char *name) {
  for (int i = 0; i < NPROFILES; i++)
    if (!strcmp(profiles[i].dev.name, name)) return &profiles[i];
  return NULL;
}

static void set_counts(Cluster *c, int gpus, int gpus_per_node, int node, const char *what) {
  if (gpus > 0) c->gpus = gpus;
  if (gpus_per_node > 0) c->gpus_per_node = gpus_per_node;
  else if (c->gpus_per_node <= 0) c->gpus_per_node = node < c->gpus ? node : c->gpus;
  if (c->gpus <= 0) error_plain("%s: the number of GPUs must be positive", what);
  if (c->gpus_per_node > c->gpus && gpus_per_node <= 0) c->gpus_per_node = c->gpus;
  if (c->gpus % c->gpus_per_node)
    error_plain("%s: %d GPUs do not fill nodes of %d GPUs (--gpus must be a multiple of --gpus-per-node)", what,
                c->gpus, c->gpus_per_node);
}

void cluster_from_profile(Cluster *c, const char *profile, int gpus, int gpus_per_node) {
  const Profile *p = find_profile(profile);
  if (!p) {
    char list[256] = "";
    for (int i = 0; cluster_profile_names[i]; i++)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", cluster_profile_names[i]);
    error_plain("unknown GPU profile '%s' (known: %s; or describe the cluster with --cluster FILE.json)", profile,
                list);
  }
  *c = (Cluster){.dev = p->dev,
                 .intra = p->intra,
                 .inter = p->inter,
                 .host_memory = p->host_memory,
                 .host_link_bw = p->host_link_bw,
                 .nvme_bw = p->nvme_bw,
                 .nvme = p->nvme,
                 .host_mem_bw = p->host_mem_bw,
                 .gpus = gpus > 0 ? gpus : 1};
  set_counts(c, gpus, gpus_per_node, p->node, "--gpus");
  snprintf(c->name, sizeof c->name, "%d x %.40s", c->gpus, p->dev.name);
  cluster_validate(c, "--gpu");
}

/* ---- validation ------------------------------------------------------------- */

static void need(bool ok, const char *what, const char *field, double v, const char *rule) {
  if (!ok) error_plain("%s: %s must be %s, got %g", what, field, rule, v);
}

static void need_pos(const char *what, const char *field, double v, double scale) {
  need(isfinite(v) && v > 0, what, field, v / scale, "a positive number");
}

static void need_frac(const char *what, const char *field, double v) {
  need(isfinite(v) && v > 0 && v <= 1, what, field, v, "in (0, 1]");
}

void cluster_validate(const Cluster *c, const char *what) {
  const DeviceSpec *d = &c->dev;
  need_pos(what, "device.peak_bf16_tflops", d->peak_bf16, T12);
  need_pos(what, "device.peak_fp16_tflops", d->peak_fp16, T12);
  need_pos(what, "device.peak_fp32_tflops", d->peak_fp32, T12);
  need_pos(what, "device.memory_gib", d->memory, GIB);
  need_pos(what, "device.memory_bandwidth_gbs", d->memory_bw, G9);
  need(isfinite(d->reserved) && d->reserved >= 0 && d->reserved < d->memory, what, "device.reserved_gib",
       d->reserved / GIB, "at least 0 and less than device.memory_gib");
  need_frac(what, "device.gemm_efficiency", d->gemm_eff);
  need_frac(what, "device.attention_efficiency", d->attn_eff);
  need_frac(what, "device.memory_efficiency", d->mem_eff);
  need(isfinite(d->kernel_overhead) && d->kernel_overhead >= 0 && d->kernel_overhead < 1, what,
       "device.kernel_overhead_us", d->kernel_overhead / US, "at least 0 and under a second");
  need(isfinite(d->peak_fp8) && d->peak_fp8 >= 0, what, "device.peak_fp8_tflops", d->peak_fp8 / T12,
       "at least 0 (0: no fp8 tensor cores)");
  need(isfinite(d->commit_bw) && d->commit_bw >= 0, what, "device.commit_bandwidth_gbs", d->commit_bw / G9,
       "at least 0 (0: commits cost nothing)");
  const LinkSpec *l[2] = {&c->intra, &c->inter};
  const char *ln[2] = {"intra_node", "inter_node"};
  char f[64];
  for (int i = 0; i < 2; i++) {
    snprintf(f, sizeof f, "%s.bandwidth_gbs", ln[i]);
    need_pos(what, f, l[i]->bandwidth, G9);
    snprintf(f, sizeof f, "%s.latency_us", ln[i]);
    need(isfinite(l[i]->latency) && l[i]->latency >= 0 && l[i]->latency < 1, what, f, l[i]->latency / US,
         "at least 0 and under a second");
    snprintf(f, sizeof f, "%s.efficiency", ln[i]);
    need_frac(what, f, l[i]->efficiency);
  }
  need_pos(what, "host.memory_gib", c->host_memory, GIB);
  need_pos(what, "host.link_bandwidth_gbs", c->host_link_bw, G9);
  need_pos(what, "host.nvme_bandwidth_gbs", c->nvme_bw, G9);
  need(isfinite(c->nvme) && c->nvme >= 0, what, "host.nvme_gib", c->nvme / GIB, "at least 0");
  need(c->gpus > 0 && c->gpus <= (1 << 24), what, "gpus", c->gpus, "between 1 and 16777216");
  need(c->gpus_per_node > 0 && c->gpus_per_node <= c->gpus, what, "gpus_per_node", c->gpus_per_node,
       "between 1 and the number of GPUs");
}

double cluster_peak(const Cluster *c) { return c->dev.fp32_only ? c->dev.peak_fp32 : c->dev.peak_bf16; }
int cluster_nodes(const Cluster *c) { return c->gpus / c->gpus_per_node; }

/* ---- cluster files ---------------------------------------------------------- */

/* Errors while reading a file are collected (the first one wins) so that the cJSON
 * tree is freed before the error unwinds. */
typedef struct Reader {
  const char *path;
  char err[320];
} Reader;

static void rd_fail(Reader *r, const char *fmt, const char *a, const char *b) {
  if (!r->err[0]) snprintf(r->err, sizeof r->err, fmt, r->path, a, b);
}

typedef struct Field {
  const char *key;
  double scale;
  double *dst;
} Field;

/* The numbers of one object (device, a link, host). Every key must be known; keys
 * listed in `other` are read elsewhere. A field left NAN is missing. */
static void read_fields(Reader *r, const cJSON *obj, const char *oname, const Field *f, int n,
                        const char *const *other) {
  if (!cJSON_IsObject(obj)) {
    rd_fail(r, "%s: '%s' must be an object%s", oname, "");
    return;
  }
  for (const cJSON *it = obj->child; it; it = it->next) {
    bool skip = false;
    for (int k = 0; other && other[k]; k++) skip |= !strcmp(other[k], it->string);
    if (skip) continue;
    int k = 0;
    while (k < n && strcmp(f[k].key, it->string)) k++;
    if (k == n) rd_fail(r, "%s: unknown field '%s.%s'", oname, it->string);
    else if (!cJSON_IsNumber(it)) rd_fail(r, "%s: %s.%s must be a number", oname, it->string);
    else *f[k].dst = it->valuedouble * f[k].scale;
  }
  for (int k = 0; k < n; k++)
    if (isnan(*f[k].dst))
      rd_fail(r, "%s: missing field '%s.%s' (or start from a built-in profile with \"base\")", oname, f[k].key);
}

static void read_string(Reader *r, const cJSON *obj, const char *key, char *dst, size_t len, const char *oname) {
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!s) return;
  if (!cJSON_IsString(s)) rd_fail(r, "%s: %s.%s must be a string", oname, key);
  else snprintf(dst, len, "%s", s->valuestring);
}

static void read_device(Reader *r, const cJSON *o, DeviceSpec *d) {
  const Field f[] = {{"peak_bf16_tflops", T12, &d->peak_bf16},    {"peak_fp16_tflops", T12, &d->peak_fp16},
                     {"peak_fp32_tflops", T12, &d->peak_fp32},    {"memory_gib", GIB, &d->memory},
                     {"memory_bandwidth_gbs", G9, &d->memory_bw}, {"reserved_gib", GIB, &d->reserved},
                     {"gemm_efficiency", 1, &d->gemm_eff},        {"attention_efficiency", 1, &d->attn_eff},
                     {"memory_efficiency", 1, &d->mem_eff},       {"kernel_overhead_us", US, &d->kernel_overhead},
                     {"peak_fp8_tflops", T12, &d->peak_fp8},      {"gemm_half_dim", 1, &d->gemm_half_dim},
                     {"commit_bandwidth_gbs", G9, &d->commit_bw}};
  static const char *const other[] = {"part", "fp32_only", "shares_host", NULL};
  read_fields(r, o, "device", f, sizeof f / sizeof f[0], other);
  if (!cJSON_IsObject(o)) return;
  read_string(r, o, "part", d->part, sizeof d->part, "device");
  const char *flags[2] = {"fp32_only", "shares_host"};
  bool *dst[2] = {&d->fp32_only, &d->shares_host};
  for (int i = 0; i < 2; i++) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, flags[i]);
    if (b && !cJSON_IsBool(b)) rd_fail(r, "%s: %s.%s must be true or false", "device", flags[i]);
    else if (b) *dst[i] = cJSON_IsTrue(b);
  }
}

/* intra_node.collectives: {"ranks": N, KIND: [[bytes, us], ...], ...} with the cost
 * model's kind names, sizes increasing; the kinds left out keep the link's figures. */
static void read_collectives(Reader *r, const cJSON *o, Cluster *c) {
  const char *on = "intra_node.collectives";
  if (!cJSON_IsObject(o)) {
    rd_fail(r, "%s: '%s' must be an object%s", on, "");
    return;
  }
  const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, "ranks");
  if (!cJSON_IsNumber(n) || n->valuedouble != floor(n->valuedouble) || n->valuedouble < 2 || n->valuedouble > 1 << 24)
    rd_fail(r, "%s: %s.ranks must be the number of ranks measured, at least 2%s", on, "");
  else c->coll_ranks = (int)n->valuedouble;
  for (const cJSON *it = o->child; it; it = it->next) {
    if (!strcmp(it->string, "ranks")) continue;
    int k = 0;
    while (k < COLL_COUNT && strcmp(coll_names[k], it->string)) k++;
    if (k == COLL_COUNT) {
      char known[160] = ""; /* the cost model's names, as the file spells them */
      for (int j = 0; j < COLL_COUNT; j++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", j ? ", " : "", coll_names[j]);
      rd_fail(r, "%s: unknown collective '%s' in intra_node.collectives (%s)", it->string, known);
      continue;
    }
    CollCurve *m = &c->coll[k];
    int np = cJSON_GetArraySize(it);
    bool ok = cJSON_IsArray(it) && np >= 1 && np <= COLL_POINTS;
    m->n = 0;
    for (const cJSON *pt = ok ? it->child : NULL; pt && ok; pt = pt->next) {
      const cJSON *b = cJSON_GetArrayItem(pt, 0), *t = cJSON_GetArrayItem(pt, 1);
      ok = cJSON_IsArray(pt) && cJSON_GetArraySize(pt) == 2 && cJSON_IsNumber(b) && cJSON_IsNumber(t) &&
           isfinite(b->valuedouble) && b->valuedouble > (m->n ? m->bytes[m->n - 1] : 0) && isfinite(t->valuedouble) &&
           t->valuedouble >= 0 && t->valuedouble < 1e6;
      if (ok) m->bytes[m->n] = b->valuedouble, m->secs[m->n] = t->valuedouble * US, m->n++;
    }
    if (!ok)
      rd_fail(r,
              "%s: intra_node.collectives.%s must be 1 to 16 points [bytes, us], bytes increasing and times at "
              "least 0 (under a second)%s",
              it->string, "");
  }
}

static void read_link(Reader *r, const cJSON *o, LinkSpec *l, const char *oname, Cluster *c) {
  const Field f[] = {
      {"bandwidth_gbs", G9, &l->bandwidth}, {"latency_us", US, &l->latency}, {"efficiency", 1, &l->efficiency}};
  static const char *const other[] = {"name", "collectives", NULL}, *const plain[] = {"name", NULL};
  read_fields(r, o, oname, f, 3, c ? other : plain);
  if (!cJSON_IsObject(o)) return;
  read_string(r, o, "name", l->name, sizeof l->name, oname);
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "collectives");
  if (c && m) read_collectives(r, m, c);
}

static void read_host(Reader *r, const cJSON *o, Cluster *c) {
  const Field f[] = {{"memory_gib", GIB, &c->host_memory},
                     {"link_bandwidth_gbs", G9, &c->host_link_bw},
                     {"nvme_bandwidth_gbs", G9, &c->nvme_bw},
                     {"memory_bandwidth_gbs", G9, &c->host_mem_bw},
                     {"nvme_gib", GIB, &c->nvme}};
  static const char *const other[] = {"cpu", NULL};
  read_fields(r, o, "host", f, 5, other);
  if (cJSON_IsObject(o)) read_string(r, o, "cpu", c->cpu, sizeof c->cpu, "host");
}

static int read_count(Reader *r, const cJSON *root, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!v) return 0;
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
      v->valuedouble > (1 << 24)) {
    rd_fail(r, "%s: %s must be a positive integer%s", key, "");
    return 0;
  }
  return (int)v->valuedouble;
}

/* A blank cluster: required figures NAN (missing), the others with defaults. */
static void blank(Cluster *c) {
  *c = (Cluster){.dev = {.peak_bf16 = NAN,
                         .peak_fp16 = NAN,
                         .peak_fp32 = NAN,
                         .memory = NAN,
                         .memory_bw = NAN,
                         .reserved = 2 * GIB,
                         .gemm_eff = 0.7,
                         .attn_eff = 0.5,
                         .mem_eff = 0.8,
                         .kernel_overhead = 4 * US},
                 .intra = {"intra-node link", NAN, 2 * US, 0.8},
                 .inter = {"inter-node network", NAN, 5 * US, 0.85},
                 .host_memory = 512 * GIB,
                 .host_link_bw = 32 * G9,
                 .nvme_bw = NVME_BW,
                 .nvme = NVME_TB,
                 .host_mem_bw = 200 * G9};
  snprintf(c->dev.name, sizeof c->dev.name, "custom");
}

static void read_cluster(Reader *r, const cJSON *root, Cluster *c, int *node) {
  static const char *const keys[] = {"name",       "base", "gpus", "gpus_per_node", "device", "intra_node",
                                     "inter_node", "host", NULL};
  if (!cJSON_IsObject(root)) {
    rd_fail(r, "%s: the cluster must be a JSON object%s%s", "", "");
    return;
  }
  for (const cJSON *it = root->child; it; it = it->next) {
    int k = 0;
    while (keys[k] && strcmp(keys[k], it->string)) k++;
    if (!keys[k]) rd_fail(r, "%s: unknown field '%s'%s", it->string, "");
  }
  const cJSON *base = cJSON_GetObjectItemCaseSensitive(root, "base");
  blank(c);
  *node = 8;
  if (base) {
    const Profile *p = cJSON_IsString(base) ? find_profile(base->valuestring) : NULL;
    if (!p) {
      rd_fail(r, "%s: base must name a built-in profile (a100-80g, a100-40g, h100-sxm, h200, rtx3090, cpu)%s%s", "",
              "");
      return;
    }
    c->dev = p->dev, c->intra = p->intra, c->inter = p->inter, c->host_memory = p->host_memory,
    c->host_link_bw = p->host_link_bw;
    c->host_mem_bw = p->host_mem_bw, c->nvme_bw = p->nvme_bw, c->nvme = p->nvme;
    *node = p->node;
  }
  const cJSON *o;
  if ((o = cJSON_GetObjectItemCaseSensitive(root, "device"))) read_device(r, o, &c->dev);
  else if (!base)
    rd_fail(r, "%s: missing object 'device' (or start from a built-in profile with \"base\")%s%s", "", "");
  if ((o = cJSON_GetObjectItemCaseSensitive(root, "intra_node"))) read_link(r, o, &c->intra, "intra_node", c);
  if ((o = cJSON_GetObjectItemCaseSensitive(root, "inter_node"))) read_link(r, o, &c->inter, "inter_node", NULL);
  if ((o = cJSON_GetObjectItemCaseSensitive(root, "host"))) read_host(r, o, c);
  if (isnan(c->intra.bandwidth)) rd_fail(r, "%s: missing field '%s'%s", "intra_node.bandwidth_gbs", "");
  if (isnan(c->inter.bandwidth)) rd_fail(r, "%s: missing field '%s'%s", "inter_node.bandwidth_gbs", "");
  read_string(r, root, "name", c->name, sizeof c->name, "cluster");
  c->gpus = read_count(r, root, "gpus");
  c->gpus_per_node = read_count(r, root, "gpus_per_node");
}

/* A device that is a whole machine (DeviceSpec.shares_host): its ranks, all of them
 * unless the nodes are given, split its compute, memory and bandwidth, as train gives
 * the ranks of a machine its threads in equal shares. */
static void share_host(Cluster *c, bool node_given) {
  if (!node_given) c->gpus_per_node = c->gpus;
  double r = c->gpus_per_node;
  DeviceSpec *d = &c->dev;
  d->peak_fp32 /= r, d->peak_bf16 /= r, d->peak_fp16 /= r, d->peak_fp8 /= r;
  d->memory /= r, d->reserved /= r, d->memory_bw /= r, d->commit_bw /= r;
  c->host_link_bw /= r;
}

void cluster_load_json(Cluster *c, const char *path, int gpus, int gpus_per_node) {
  FILE *f = fopen(path, "rb");
  if (!f) error_plain("cannot read cluster file %s", path);
  char *text = NULL;
  size_t len = 0, cap = 0, got;
  char buf[4096];
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
    if (len + got + 1 > cap) {
      cap = (len + got + 1) * 2;
      char *t = realloc(text, cap);
      if (!t) {
        free(text);
        fclose(f);
        error_plain("%s: out of memory", path);
      }
      text = t;
    }
    memcpy(text + len, buf, got);
    len += got;
  }
  fclose(f);
  cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
  free(text);
  if (!root) error_plain("%s: not valid JSON", path);
  Reader r = {.path = path};
  int node = 8;
  read_cluster(&r, root, c, &node);
  cJSON_Delete(root);
  if (r.err[0]) error_plain("%s", r.err);
  if (!c->name[0]) snprintf(c->name, sizeof c->name, "%s", path);
  if (!c->gpus && gpus <= 0) c->gpus = 1;
  bool node_given = c->gpus_per_node > 0 || gpus_per_node > 0;
  set_counts(c, gpus, gpus_per_node, node, path);
  if (c->dev.shares_host) share_host(c, node_given);
  cluster_validate(c, path);
}
