/* hf: Hugging Face checkpoints (see the header). The families are one table of
 * plain data: names, buffers, the parameters with their shapes in symbols (V vocab,
 * D width, F MLP width, K key/value width, P positions; L layers, H heads and S seq
 * come from the layer numbers, the "arch" and the program), and config.json's keys.
 * Reading binds a file's tensors to names and checks its config.json against the
 * "arch"; writing binds the symbols and prints the config.
 */
#include "runtime/io/hf.h"

#include "runtime/io/fileio.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_INDEX "model.safetensors.index.json"
#define HF_WEIGHTS "model.safetensors"
#define HF_CONFIG "config.json"
#define HF_NAME_MAX 512

/* ---- the families --------------------------------------------------------------- */

/* A config.json value: an integer symbol (s, one letter), the norms' eps, the rotary
 * base, the key/value heads, the window (null when none), the rotary scaling (null
 * when none), a string, a number, a boolean (x), null, or the architecture as a list. */
typedef enum HfCfgKind {
  HC_SIZE,
  HC_EPS,
  HC_THETA,
  HC_KV,
  HC_WINDOW,
  HC_ROPE_SCALING,
  HC_STR,
  HC_NUM,
  HC_BOOL,
  HC_NULL,
  HC_ARCH
} HfCfgKind;

typedef struct HfCfg {
  const char *key;
  HfCfgKind kind;
  const char *s;
  double x;
} HfCfg;

/* A parameter: its name ('#' a layer number) and its dimensions (symbols, '*' any). */
typedef struct HfParamRow {
  const char *pattern;
  const char *dims;
} HfParamRow;

struct HfFamily {
  const char *name;              /* model_type */
  const char *architecture;      /* the transformers class config.json names */
  const char *marker;            /* a parameter only this family's models have */
  const char *prefix;            /* before the base model's names in transformers' files */
  const char *head, *embed;      /* the output head and the embedding it may be tied to */
  const char *norm, *activation; /* what the program's "arch" must say */
  int rotary;                    /* rope_theta required (else absent) */
  int grouped;                   /* key/value heads may be fewer than heads (K wide) */
  int windowed;                  /* a sliding window required (else absent) */
  int scaled;                    /* rotary scaling may be given (LLaMA 3.1's) */
  const char *const *buffers;    /* tensors that are not parameters, NULL-terminated */
  const HfParamRow *params;      /* {NULL} ends */
  const HfCfg *config;           /* {NULL} ends */
};

static const char *const gpt2_buffers[] = {"h.#.attn.bias", "h.#.attn.masked_bias", NULL};
static const HfParamRow gpt2_params[] = {{"wte.weight", "V,D"},
                                         {"wpe.weight", "P,D"},
                                         {"h.#.ln_1.weight", "D"},
                                         {"h.#.ln_1.bias", "D"},
                                         {"h.#.attn.c_attn.weight", "D,*"},
                                         {"h.#.attn.c_attn.bias", "*"},
                                         {"h.#.attn.c_proj.weight", "D,D"},
                                         {"h.#.attn.c_proj.bias", "D"},
                                         {"h.#.ln_2.weight", "D"},
                                         {"h.#.ln_2.bias", "D"},
                                         {"h.#.mlp.c_fc.weight", "D,F"},
                                         {"h.#.mlp.c_fc.bias", "F"},
                                         {"h.#.mlp.c_proj.weight", "F,D"},
                                         {"h.#.mlp.c_proj.bias", "D"},
                                         {"ln_f.weight", "D"},
                                         {"ln_f.bias", "D"},
                                         {NULL, NULL}};
/* GPT2Config: the model has no dropout, so none is written */
static const HfCfg gpt2_config[] = {{"architectures", HC_ARCH, NULL, 0},
                                    {"model_type", HC_STR, "gpt2", 0},
                                    {"vocab_size", HC_SIZE, "V", 0},
                                    {"n_positions", HC_SIZE, "P", 0},
                                    {"n_embd", HC_SIZE, "D", 0},
                                    {"n_layer", HC_SIZE, "L", 0},
                                    {"n_head", HC_SIZE, "H", 0},
                                    {"n_inner", HC_SIZE, "F", 0},
                                    {"activation_function", HC_STR, "gelu_new", 0},
                                    {"layer_norm_epsilon", HC_EPS, NULL, 0},
                                    {"resid_pdrop", HC_NUM, NULL, 0},
                                    {"embd_pdrop", HC_NUM, NULL, 0},
                                    {"attn_pdrop", HC_NUM, NULL, 0},
                                    {"initializer_range", HC_NUM, NULL, 0.02},
                                    {"scale_attn_weights", HC_BOOL, NULL, 1},
                                    {"scale_attn_by_inverse_layer_idx", HC_BOOL, NULL, 0},
                                    {"reorder_and_upcast_attn", HC_BOOL, NULL, 0},
                                    {"tie_word_embeddings", HC_BOOL, NULL, 1},
                                    {"use_cache", HC_BOOL, NULL, 1},
                                    {"torch_dtype", HC_STR, "float32", 0},
                                    {NULL, HC_NULL, NULL, 0}};

static const char *const llama_buffers[] = {"model.layers.#.self_attn.rotary_emb.inv_freq", NULL};
/* LLaMA's parameters; Qwen2's with QKV_BIAS */
// clang-format off
#define LLAMA_PARAMS(QKV_BIAS)                                                                                \
  {"model.embed_tokens.weight", "V,D"}, {"model.layers.#.input_layernorm.weight", "D"},                       \
  {"model.layers.#.self_attn.q_proj.weight", "D,D"}, {"model.layers.#.self_attn.k_proj.weight", "K,D"},       \
  {"model.layers.#.self_attn.v_proj.weight", "K,D"}, QKV_BIAS                                                 \
  {"model.layers.#.self_attn.o_proj.weight", "D,D"}, {"model.layers.#.post_attention_layernorm.weight", "D"}, \
  {"model.layers.#.mlp.gate_proj.weight", "F,D"}, {"model.layers.#.mlp.up_proj.weight", "F,D"},               \
  {"model.layers.#.mlp.down_proj.weight", "D,F"}, {"model.norm.weight", "D"}, {"lm_head.weight", "V,D"}
#define NO_BIAS
#define QKV_BIAS                                                                                              \
  {"model.layers.#.self_attn.q_proj.bias", "D"}, {"model.layers.#.self_attn.k_proj.bias", "K"},               \
  {"model.layers.#.self_attn.v_proj.bias", "K"},
// clang-format on
static const HfParamRow llama_params[] = {LLAMA_PARAMS(NO_BIAS), {NULL, NULL}};
static const HfParamRow qwen2_params[] = {LLAMA_PARAMS(QKV_BIAS), {NULL, NULL}};
/* The config keys LLaMA, Mistral and Qwen2 share: rotary positions need no table, so
 * max_position_embeddings is the compiled seq (transformers' rotary cache grows past it) */
// clang-format off
#define LLAMA_CONFIG(TYPE)                                                                                    \
  {"architectures", HC_ARCH, NULL, 0}, {"model_type", HC_STR, TYPE, 0}, {"vocab_size", HC_SIZE, "V", 0},      \
  {"hidden_size", HC_SIZE, "D", 0}, {"intermediate_size", HC_SIZE, "F", 0},                                   \
  {"num_hidden_layers", HC_SIZE, "L", 0}, {"num_attention_heads", HC_SIZE, "H", 0},                           \
  {"num_key_value_heads", HC_KV, NULL, 0}, {"hidden_act", HC_STR, "silu", 0},                                 \
  {"max_position_embeddings", HC_SIZE, "S", 0}, {"rms_norm_eps", HC_EPS, NULL, 0},                            \
  {"rope_theta", HC_THETA, NULL, 0}
#define LLAMA_CONFIG_END                                                                                      \
  {"attention_dropout", HC_NUM, NULL, 0}, {"initializer_range", HC_NUM, NULL, 0.02},                          \
  {"tie_word_embeddings", HC_BOOL, NULL, 0}, {"use_cache", HC_BOOL, NULL, 1},                                 \
  {"torch_dtype", HC_STR, "float32", 0}, {NULL, HC_NULL, NULL, 0}
// clang-format on
/* LlamaConfig: LLaMA 3.1's rotary scaling, no biases */
static const HfCfg llama_config[] = {
    LLAMA_CONFIG("llama"),          {"rope_scaling", HC_ROPE_SCALING, NULL, 0}, {"attention_bias", HC_BOOL, NULL, 0},
    {"mlp_bias", HC_BOOL, NULL, 0}, {"pretraining_tp", HC_NUM, NULL, 1},        LLAMA_CONFIG_END};
/* MistralConfig: the sliding window (the keys a query sees) */
static const HfCfg mistral_config[] = {
    LLAMA_CONFIG("mistral"), {"sliding_window", HC_WINDOW, NULL, 0}, LLAMA_CONFIG_END};
/* Qwen2Config: q, k and v biases (the parameters), no sliding window */
static const HfCfg qwen2_config[] = {LLAMA_CONFIG("qwen2"),
                                     {"rope_scaling", HC_NULL, NULL, 0},
                                     {"use_sliding_window", HC_BOOL, NULL, 0},
                                     {"sliding_window", HC_NULL, NULL, 0},
                                     {"max_window_layers", HC_SIZE, "L", 0},
                                     LLAMA_CONFIG_END};

/* Qwen2 before LLaMA and Mistral: its marker is a name they lack; LLaMA and Mistral
 * have the same names and differ by the window (hf_family_of). */
static const HfFamily hf_families[] = {
    {"gpt2", "GPT2LMHeadModel", "wpe.weight", "transformer.", "lm_head.weight", "wte.weight", "layernorm", "gelu_tanh",
     0, 0, 0, 0, gpt2_buffers, gpt2_params, gpt2_config},
    {"qwen2", "Qwen2ForCausalLM", "model.layers.0.self_attn.q_proj.bias", "", "lm_head.weight",
     "model.embed_tokens.weight", "rmsnorm", "silu", 1, 1, 0, 0, llama_buffers, qwen2_params, qwen2_config},
    {"llama", "LlamaForCausalLM", "model.embed_tokens.weight", "", "lm_head.weight", "model.embed_tokens.weight",
     "rmsnorm", "silu", 1, 1, 0, 1, llama_buffers, llama_params, llama_config},
    {"mistral", "MistralForCausalLM", "model.embed_tokens.weight", "", "lm_head.weight", "model.embed_tokens.weight",
     "rmsnorm", "silu", 1, 1, 1, 0, llama_buffers, llama_params, mistral_config},
};
enum { HF_NFAMILIES = sizeof hf_families / sizeof hf_families[0] };

const HfFamily *hf_family_of(const char *const *names, int n, const HfArch *arch) {
  for (int f = 0; f < HF_NFAMILIES; f++) {
    if (arch && hf_families[f].windowed != (arch->window > 0)) continue;
    for (int i = 0; i < n; i++)
      if (strcmp(names[i], hf_families[f].marker) == 0) return &hf_families[f];
  }
  return NULL;
}

const char *hf_family_name(const HfFamily *f) { return f->name; }

const char *hf_family_head(const HfFamily *f) { return f->head; }

const char *hf_family_embed(const HfFamily *f) { return f->embed; }

/* s matches pattern ('#' a decimal number, stored in *layer). */
static int hf_match(const char *pat, const char *s, int64_t *layer) {
  for (; *pat; pat++) {
    if (*pat != '#') {
      if (*s++ != *pat) return 0;
      continue;
    }
    if (!isdigit((unsigned char)*s)) return 0;
    int64_t v = 0;
    for (; isdigit((unsigned char)*s) && v < (1 << 24); s++) v = v * 10 + (*s - '0');
    *layer = v;
  }
  return *s == 0;
}

HfRole hf_model_name(const HfFamily *f, const char *file_name, char *out, size_t len) {
  size_t np = f ? strlen(f->prefix) : 0;
  const char *s = np && strncmp(file_name, f->prefix, np) == 0 ? file_name + np : file_name;
  snprintf(out, len, "%s", s);
  int64_t layer;
  for (int i = 0; f && f->buffers[i]; i++)
    if (hf_match(f->buffers[i], out, &layer)) return HF_BUFFER;
  return HF_PARAM;
}

/* ---- reading -------------------------------------------------------------------- */

typedef struct HfEntry {
  const char *name;
  int file;
  const SafeTensor *t;
} HfEntry;

struct HfSource {
  char *path;
  SafeTensors **files; /* [nfiles] */
  char **file_names;   /* [nfiles] as the index names them (NULL for one file) */
  int nfiles;
  HfEntry *e; /* [n] sorted by name */
  int n;
};

const char *hf_source_path(const HfSource *s) { return s->path; }

int hf_source_count(const HfSource *s) { return s->n; }

const SafeTensor *hf_source_get(const HfSource *s, int i, const SafeTensors **file) {
  if (i < 0 || i >= s->n) return NULL;
  *file = s->files[s->e[i].file];
  return s->e[i].t;
}

static int entry_cmp(const void *a, const void *b) {
  return strcmp(((const HfEntry *)a)->name, ((const HfEntry *)b)->name);
}

static const HfEntry *source_entry(const HfSource *s, const char *name) {
  HfEntry key = {name, 0, NULL};
  return s->n ? bsearch(&key, s->e, (size_t)s->n, sizeof *s->e, entry_cmp) : NULL;
}

const SafeTensor *hf_source_find(const HfSource *s, const char *name, const SafeTensors **file) {
  const HfEntry *e = source_entry(s, name);
  if (e) *file = s->files[e->file];
  return e ? e->t : NULL;
}

void hf_source_close(HfSource *s) {
  if (!s) return;
  for (int i = 0; i < s->nfiles; i++) safetensors_close(s->files[i]);
  for (int i = 0; s->file_names && s->file_names[i]; i++) /* NULL-terminated */
    free(s->file_names[i]);
  free(s->files);
  free(s->file_names);
  free(s->e);
  free(s->path);
  free(s);
}

/* Opens path as file i (files[] and file_names[] have room). */
static int source_add_file(HfSource *s, const char *path, char *err, size_t errlen) {
  SafeTensors *st = safetensors_open(path, err, errlen);
  if (!st) return -1;
  s->files[s->nfiles++] = st;
  return 0;
}

/* The entries of every file, sorted; a name in two files is an error. */
static int source_index_entries(HfSource *s, char *err, size_t errlen) {
  int total = 0;
  for (int f = 0; f < s->nfiles; f++) total += safetensors_count(s->files[f]);
  if (!(s->e = calloc((size_t)total + 1, sizeof *s->e)))
    return file_set_error(err, errlen, "%s: out of memory", s->path);
  for (int f = 0; f < s->nfiles; f++)
    for (int i = 0; i < safetensors_count(s->files[f]); i++) {
      const SafeTensor *t = safetensors_get(s->files[f], i);
      s->e[s->n++] = (HfEntry){t->name, f, t};
    }
  qsort(s->e, (size_t)s->n, sizeof *s->e, entry_cmp);
  for (int i = 1; i < s->n; i++)
    if (strcmp(s->e[i - 1].name, s->e[i].name) == 0)
      return file_set_error(err, errlen, "%s: tensor '%s' is in two shards, %s and %s", s->path, s->e[i].name,
                            s->file_names[s->e[i - 1].file], s->file_names[s->e[i].file]);
  return 0;
}

static int source_single(HfSource *s, const char *path, char *err, size_t errlen) {
  if (!(s->files = calloc(1, sizeof *s->files))) return file_set_error(err, errlen, "%s: out of memory", path);
  if (source_add_file(s, path, err, errlen) != 0) return -1;
  return source_index_entries(s, err, errlen);
}

/* A shard name of the weight_map: a plain file name in the index's directory. */
static int index_file_name(const char *index, const cJSON *v, char *err, size_t errlen) {
  if (!cJSON_IsString(v) || !v->valuestring[0] || strchr(v->valuestring, '/') || strcmp(v->valuestring, "..") == 0 ||
      strcmp(v->valuestring, ".") == 0)
    return file_set_error(err, errlen,
                          "%s: bad index: weight_map[\"%s\"] is not the name of a file "
                          "beside the index",
                          index, v->string);
  return 0;
}

/* The distinct shard names of the weight_map, in order of first mention. */
static int index_shards(HfSource *s, const char *index, const cJSON *wm, char *err, size_t errlen) {
  int n = cJSON_GetArraySize(wm);
  s->files = calloc((size_t)n + 1, sizeof *s->files);
  s->file_names = calloc((size_t)n + 1, sizeof *s->file_names);
  if (!s->files || !s->file_names) return file_set_error(err, errlen, "%s: out of memory", index);
  int nnames = 0;
  for (const cJSON *v = wm->child; v; v = v->next) {
    if (index_file_name(index, v, err, errlen) != 0) return -1;
    int k = 0;
    while (k < nnames && strcmp(s->file_names[k], v->valuestring) != 0) k++;
    if (k == nnames && !(s->file_names[nnames++] = strdup(v->valuestring)))
      return file_set_error(err, errlen, "%s: out of memory", index);
  }
  return nnames;
}

static int index_open_shards(HfSource *s, const char *index, int nshards, char *err, size_t errlen) {
  char *dir = strdup(index), path[4096];
  if (!dir) return file_set_error(err, errlen, "%s: out of memory", index);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  int rc = 0;
  for (int k = 0; k < nshards && rc == 0; k++) {
    snprintf(path, sizeof path, "%s/%s", slash ? dir : ".", s->file_names[k]);
    rc = source_add_file(s, path, err, errlen);
  }
  free(dir);
  return rc;
}

/* Every tensor of the shards is in the weight_map, under its own shard; every name
 * the weight_map gives is in the shard it names. */
static int index_check(const HfSource *s, const char *index, const cJSON *wm, char *err, size_t errlen) {
  for (const cJSON *v = wm->child; v; v = v->next) {
    const HfEntry *e = source_entry(s, v->string);
    if (!e || strcmp(s->file_names[e->file], v->valuestring) != 0)
      return file_set_error(err, errlen, "%s: bad index: it puts '%s' in %s, which does not hold it", index, v->string,
                            v->valuestring);
  }
  for (int i = 0; i < s->n; i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(wm, s->e[i].name);
    if (!v)
      return file_set_error(err, errlen,
                            "%s: bad index: shard %s holds '%s', which the weight_map "
                            "does not list",
                            index, s->file_names[s->e[i].file], s->e[i].name);
  }
  return 0;
}

static int index_load(HfSource *s, const char *index, const cJSON *root, char *err, size_t errlen) {
  const cJSON *wm = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
  if (!cJSON_IsObject(wm) || !wm->child)
    return file_set_error(err, errlen,
                          "%s: bad index: no \"weight_map\" object naming the shard of each "
                          "tensor",
                          index);
  int nshards = index_shards(s, index, wm, err, errlen);
  if (nshards < 0 || index_open_shards(s, index, nshards, err, errlen) != 0 ||
      source_index_entries(s, err, errlen) != 0)
    return -1;
  return index_check(s, index, wm, err, errlen);
}

static int source_index(HfSource *s, const char *index, char *err, size_t errlen) {
  size_t len;
  char *text = file_read_all(index, &len, err, errlen);
  if (!text) return -1;
  cJSON *root = cJSON_ParseWithLength(text, len);
  free(text);
  if (!root) return file_set_error(err, errlen, "%s: bad index: not valid JSON", index);
  int rc = index_load(s, index, root, err, errlen);
  cJSON_Delete(root);
  return rc;
}

static int ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), k = strlen(tail);
  return n >= k && strcmp(s + n - k, tail) == 0;
}

/* A directory: its index, else its model.safetensors; a .json: an index; else a file. */
static int source_resolve(HfSource *s, const char *path, char *err, size_t errlen) {
  struct stat sb;
  char in[4096];
  if (stat(path, &sb) != 0) return file_set_error(err, errlen, "%s: cannot open: %s", path, strerror(errno));
  if (!S_ISDIR(sb.st_mode))
    return ends_with(path, ".json") ? source_index(s, path, err, errlen) : source_single(s, path, err, errlen);
  snprintf(in, sizeof in, "%s/%s", path, HF_INDEX);
  if (access(in, F_OK) == 0) return source_index(s, in, err, errlen);
  snprintf(in, sizeof in, "%s/%s", path, HF_WEIGHTS);
  if (access(in, F_OK) == 0) return source_single(s, in, err, errlen);
  return file_set_error(err, errlen, "%s: a directory with neither %s nor %s", path, HF_INDEX, HF_WEIGHTS);
}

HfSource *hf_source_open(const char *path, char *err, size_t errlen) {
  HfSource *s = calloc(1, sizeof *s);
  if (!s || !(s->path = strdup(path))) {
    free(s);
    file_set_error(err, errlen, "%s: out of memory", path);
    return NULL;
  }
  if (source_resolve(s, path, err, errlen) != 0) {
    hf_source_close(s);
    return NULL;
  }
  return s;
}

/* No rotary scaling: no rotary ops, or their factor 1. */
static int unscaled(const HfArch *a) { return a->rope_theta == 0 || a->rope_scaling[0] == 1; }

/* What transformers computes for the family, against what the program computes. */
static int arch_fits(const HfFamily *f, const HfArch *a, char *err, size_t errlen) {
  char why[160];
  why[0] = 0;
  if (a->heads <= 0 || !a->causal || a->scaled)
    snprintf(why, sizeof why, "its attention is not one causal attention with %s",
             a->heads <= 0 ? "the same heads everywhere" : "the default scale");
  else if (strcmp(a->norm, f->norm) != 0 || !(a->norm_eps > 0))
    snprintf(why, sizeof why, "its norms are %s, not %s with one eps", a->norm[0] ? a->norm : "none", f->norm);
  else if (strcmp(a->activation, f->activation) != 0)
    snprintf(why, sizeof why, "its activation is %s, not %s", a->activation[0] ? a->activation : "none", f->activation);
  else if (f->rotary != (a->rope_theta != 0) || a->rope_theta < 0)
    snprintf(why, sizeof why, "%s", f->rotary ? "its rotary ops do not have one base" : "it has rotary positions");
  else if (a->kv_heads <= 0 || a->heads % a->kv_heads || (!f->grouped && a->kv_heads != a->heads))
    snprintf(why, sizeof why, "%s",
             f->grouped ? "its attention ops do not share one count of key/value heads"
                        : "it shares key/value heads across query heads");
  else if (f->windowed != (a->window > 0))
    snprintf(why, sizeof why, "%s", f->windowed ? "its attention ops do not have one window" : "it has a window");
  else if (!unscaled(a) && (!f->scaled || a->rope_scaling[0] < 0 || a->rope_scaling[1] < 0 || a->rope_scaling[2] < 0 ||
                            a->rope_scaling[3] < 0))
    snprintf(why, sizeof why, "%s",
             f->scaled ? "its rotary ops do not share one scaling" : "it scales its rotary positions");
  if (why[0])
    return file_set_error(err, errlen, "the model does not compute what transformers' %s (%s) does: %s", f->name,
                          f->architecture, why);
  return 0;
}

/* ---- the config beside a checkpoint --------------------------------------------- */

/* LLaMA 3.1's rope_scaling as its released config.json gives it, or null (none). */
static cJSON *rope_scaling_json(const HfArch *a) {
  if (unscaled(a)) return cJSON_CreateNull();
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "factor", a->rope_scaling[0]);
  cJSON_AddNumberToObject(o, "low_freq_factor", a->rope_scaling[1]);
  cJSON_AddNumberToObject(o, "high_freq_factor", a->rope_scaling[2]);
  cJSON_AddNumberToObject(o, "original_max_position_embeddings", a->rope_scaling[3]);
  cJSON_AddStringToObject(o, "rope_type", "llama3");
  return o;
}

/* A file's rope_scaling is the model's: null (or absent) for none, else of type llama3
 * ("rope_type", or the older "type") with the same four numbers. */
static int rope_scaling_agrees(const cJSON *v, const HfArch *a) {
  if (!v || cJSON_IsNull(v)) return unscaled(a);
  if (unscaled(a)) return 0;
  static const char *const keys[4] = {"factor", "low_freq_factor", "high_freq_factor",
                                      "original_max_position_embeddings"};
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "rope_type");
  if (!t) t = cJSON_GetObjectItemCaseSensitive(v, "type");
  if (!cJSON_IsString(t) || strcmp(t->valuestring, "llama3") != 0) return 0;
  for (int k = 0; k < 4; k++) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(v, keys[k]);
    if (!cJSON_IsNumber(x) || fabs(x->valuedouble - a->rope_scaling[k]) > 1e-6 * fabs(a->rope_scaling[k])) return 0;
  }
  return 1;
}

typedef struct HfBind HfBind;
static cJSON *config_value(const HfFamily *f, const HfCfg *c, const HfBind *b, const HfArch *a);

/* config.json in the checkpoint's directory (the path's, or the one holding its file). */
static cJSON *source_config(const HfSource *s, char *path, size_t len, char *err, size_t errlen, int *rc) {
  struct stat sb;
  *rc = 0;
  if (stat(s->path, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(path, len, "%s/%s", s->path, HF_CONFIG);
  else {
    const char *slash = strrchr(s->path, '/');
    snprintf(path, len, "%.*s%s", slash ? (int)(slash - s->path + 1) : 0, s->path, HF_CONFIG);
  }
  if (access(path, F_OK) != 0) return NULL;
  size_t n;
  char *text = file_read_all(path, &n, err, errlen);
  cJSON *o = text ? cJSON_ParseWithLength(text, n) : NULL;
  free(text);
  if (!cJSON_IsObject(o)) {
    cJSON_Delete(o);
    *rc = text ? file_set_error(err, errlen, "%s: not a JSON object", path) : -1;
  }
  return o;
}

/* A config value as text, for messages. */
static void value_text(const cJSON *v, char *buf, size_t len) {
  char *t = v ? cJSON_PrintUnformatted(v) : NULL;
  snprintf(buf, len, "%s", t ? t : "absent");
  free(t);
}

/* The file's value of key c agrees with what the model computes (w, what hf_save would
 * write): the heads, key/value heads, window, norms' eps, rotary base, activation and
 * model type; rotary scaling and a sliding window the family does not use must be
 * null or false. Sizes are the tensors' shapes (checked there), the rest is not
 * computed. */
static int config_agrees(const HfCfg *c, const cJSON *v, const cJSON *w) {
  switch (c->kind) {
  case HC_SIZE: return c->s[0] != 'H' || (cJSON_IsNumber(v) && v->valuedouble == w->valuedouble);
  case HC_KV: return cJSON_IsNumber(v) && v->valuedouble == w->valuedouble;
  case HC_WINDOW: return cJSON_IsNull(w) ? cJSON_IsNull(v) : cJSON_IsNumber(v) && v->valuedouble == w->valuedouble;
  case HC_EPS:
  case HC_THETA: return cJSON_IsNumber(v) && fabs(v->valuedouble - w->valuedouble) <= 1e-6 * fabs(w->valuedouble);
  case HC_STR:
    return strcmp(c->key, "torch_dtype") == 0 || (cJSON_IsString(v) && strcmp(v->valuestring, w->valuestring) == 0);
  case HC_BOOL: return strcmp(c->key, "use_sliding_window") != 0 || cJSON_IsFalse(v);
  case HC_ROPE_SCALING: /* hf_check_config, for every family */
  case HC_NULL:
  case HC_NUM:
  case HC_ARCH: return 1;
  }
  return 1;
}

int hf_check_config(const HfSource *s, const HfFamily *f, const HfArch *a, int model_ties, char *err, size_t errlen) {
  char path[4096], want[256], got[256];
  int rc;
  if (!f || !a) return 0;
  cJSON *o = source_config(s, path, sizeof path, err, errlen, &rc);
  if (!o) return rc;
  for (int i = 0; rc == 0 && f->config[i].key; i++) {
    const HfCfg *c = &f->config[i];
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, c->key);
    cJSON *dflt = !v && c->kind == HC_THETA ? cJSON_CreateNumber(10000) : NULL; /* transformers' default */
    if (dflt) v = dflt;
    if (!v || (c->kind == HC_SIZE && c->s[0] != 'H')) continue; /* left out: transformers' default */
    cJSON *w = c->kind == HC_SIZE ? cJSON_CreateNumber((double)a->heads) : config_value(f, c, NULL, a); /* heads */
    if (w && !config_agrees(c, v, w)) {
      value_text(v, got, sizeof got), value_text(w, want, sizeof want);
      rc = file_set_error(err, errlen, "%s: \"%s\" is %s, but the model computes %s", path, c->key, got,
                          c->kind == HC_BOOL ? "without it" : want);
    }
    cJSON_Delete(w);
    cJSON_Delete(dflt);
  }
  const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(o, "rope_scaling"); /* whatever the family's table says */
  if (rc == 0 && !rope_scaling_agrees(scaling, a)) {
    cJSON *w = rope_scaling_json(a);
    value_text(scaling, got, sizeof got), value_text(w, want, sizeof want);
    cJSON_Delete(w);
    rc = file_set_error(err, errlen, "%s: \"rope_scaling\" is %s, but the model computes %s", path, got,
                        unscaled(a) ? "without it" : want);
  }
  const cJSON *tie = cJSON_GetObjectItemCaseSensitive(o, "tie_word_embeddings");
  if (rc == 0 && model_ties && cJSON_IsFalse(tie))
    rc = file_set_error(
        err, errlen, "%s: \"tie_word_embeddings\" is false, but the model ties its output head to the embedding", path);
  cJSON_Delete(o);
  return rc;
}

/* ---- writing -------------------------------------------------------------------- */

struct HfBind {
  int64_t sym[26];      /* by letter */
  const char *from[26]; /* the parameter that bound it (NULL: unbound) */
  int64_t layers;
  int *count; /* [rows] matches per row */
};

/* Binds (or checks) the symbols of dims against p's shape. */
static int bind_dims(const HfFamily *f, HfBind *b, const HfParam *p, const char *dims, char *err, size_t errlen) {
  char sh[160];
  int ndim = (int)(strlen(dims) + 1) / 2;
  safetensors_shape_text(sh, sizeof sh, p->ndim, p->shape);
  if (p->ndim != ndim)
    return file_set_error(err, errlen,
                          "%s has shape %s: transformers' %s has %d dimensions "
                          "there",
                          p->name, sh, f->name, ndim);
  for (int d = 0; d < ndim; d++) {
    char c = dims[2 * d];
    if (c == '*') continue;
    int k = c - 'A';
    if (b->from[k] && b->sym[k] != p->shape[d])
      return file_set_error(err, errlen,
                            "%s has shape %s: transformers' %s needs %" PRId64 " as dimension %d (as in %s)", p->name,
                            sh, f->name, b->sym[k], d, b->from[k]);
    b->sym[k] = p->shape[d], b->from[k] = p->name;
  }
  return 0;
}

static int bind_param(const HfFamily *f, HfBind *b, const HfParam *p, char *err, size_t errlen) {
  for (int r = 0; f->params[r].pattern; r++) {
    int64_t layer = -1;
    if (!hf_match(f->params[r].pattern, p->name, &layer)) continue;
    b->count[r]++;
    b->layers = layer + 1 > b->layers ? layer + 1 : b->layers;
    return bind_dims(f, b, p, f->params[r].dims, err, errlen);
  }
  return file_set_error(err, errlen, "%s is not a parameter of transformers' %s (%s)", p->name, f->name,
                        f->architecture);
}

/* Every row matched once, or once per layer. */
static int bind_complete(const HfFamily *f, const HfBind *b, char *err, size_t errlen) {
  for (int r = 0; f->params[r].pattern; r++) {
    int per_layer = strchr(f->params[r].pattern, '#') != NULL;
    int64_t want = per_layer ? b->layers : 1;
    if (b->count[r] != want)
      return file_set_error(err, errlen,
                            "the model has %d parameters named %s where transformers' %s "
                            "has %" PRId64 " (%" PRId64 " layers)",
                            b->count[r], f->params[r].pattern, f->name, want, b->layers);
  }
  return 0;
}

static int bind_all(const HfFamily *f, HfBind *b, const HfParam *ps, int n, char *err, size_t errlen) {
  int rows = 0;
  while (f->params[rows].pattern) rows++;
  if (!(b->count = calloc((size_t)rows, sizeof *b->count))) return file_set_error(err, errlen, "out of memory");
  for (int i = 0; i < n; i++)
    if (bind_param(f, b, &ps[i], err, errlen) != 0) return -1;
  return bind_complete(f, b, err, errlen);
}

static cJSON *config_value(const HfFamily *f, const HfCfg *c, const HfBind *b, const HfArch *a) {
  switch (c->kind) {
  case HC_SIZE: return b ? cJSON_CreateNumber((double)b->sym[c->s[0] - 'A']) : NULL;
  case HC_EPS: return cJSON_CreateNumber(a->norm_eps);
  case HC_THETA: return cJSON_CreateNumber(a->rope_theta);
  case HC_KV: return cJSON_CreateNumber((double)a->kv_heads);
  case HC_WINDOW: return a->window > 0 ? cJSON_CreateNumber((double)a->window) : cJSON_CreateNull();
  case HC_ROPE_SCALING: return rope_scaling_json(a);
  case HC_STR: return cJSON_CreateString(c->s);
  case HC_NUM: return cJSON_CreateNumber(c->x);
  case HC_BOOL: return cJSON_CreateBool(c->x != 0);
  case HC_NULL: return cJSON_CreateNull();
  case HC_ARCH: return cJSON_CreateStringArray(&f->architecture, 1);
  }
  return NULL;
}

static int write_config(const char *dir, const HfFamily *f, const HfBind *b, const HfArch *a, char *err,
                        size_t errlen) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, HF_CONFIG);
  cJSON *o = cJSON_CreateObject();
  for (int i = 0; o && f->config[i].key; i++) {
    cJSON *v = config_value(f, &f->config[i], b, a);
    if (!v || !cJSON_AddItemToObject(o, f->config[i].key, v)) {
      cJSON_Delete(v);
      cJSON_Delete(o), o = NULL;
    }
  }
  char *text = o ? cJSON_Print(o) : NULL;
  cJSON_Delete(o);
  if (!text) return file_set_error(err, errlen, "%s: out of memory", path);
  const void *chunks[2] = {text, "\n"};
  size_t lens[2] = {strlen(text), 1};
  int rc = file_write_atomic(path, chunks, lens, 2, err, errlen);
  free(text);
  return rc;
}

/* The names transformers writes: the base model's prefix on all but the head. */
static int write_weights(const char *dir, const HfFamily *f, const HfParam *ps, int n, SafeTensorFill fill, void *arg,
                         char *err, size_t errlen) {
  static const char *const keys[1] = {"format"}, *const vals[1] = {"pt"};
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, HF_WEIGHTS);
  SafeTensorOut *out = calloc((size_t)n + 1, sizeof *out);
  char **names = calloc((size_t)n + 1, sizeof *names);
  int rc = out && names ? 0 : file_set_error(err, errlen, "%s: out of memory", path);
  for (int i = 0; rc == 0 && i < n; i++) {
    const char *pre = strcmp(ps[i].name, f->head) == 0 ? "" : f->prefix;
    if (asprintf(&names[i], "%s%s", pre, ps[i].name) < 0)
      names[i] = NULL, rc = file_set_error(err, errlen, "%s: out of memory", path);
    out[i] = (SafeTensorOut){names[i], ps[i].ndim, ps[i].shape, ps[i].data};
  }
  if (rc == 0) rc = safetensors_write_stream(path, out, n, keys, vals, 1, fill, arg, ST_WRITE_BUFFER, err, errlen);
  for (int i = 0; names && i < n; i++) free(names[i]);
  free(names);
  free(out);
  return rc;
}

static int make_dir(const char *dir, char *err, size_t errlen) { return file_make_dirs(dir, err, errlen); }

static int family_for_save(const HfParam *ps, int n, const HfArch *a, const HfFamily **f, char *err, size_t errlen) {
  const char **names = calloc((size_t)n + 1, sizeof *names);
  if (!names) return file_set_error(err, errlen, "out of memory");
  for (int i = 0; i < n; i++) names[i] = ps[i].name;
  *f = hf_family_of(names, n, a);
  free(names);
  if (!*f)
    return file_set_error(err, errlen,
                          "the model's parameters follow no transformers layout colossalc "
                          "writes (gpt2: wpe.weight, h.N.attn.c_attn.weight, ...; llama, mistral (with a "
                          "window): model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ...; "
                          "qwen2: the same with model.layers.N.self_attn.q_proj.bias)");
  return 0;
}

int hf_save(const char *dir, const HfParam *ps, int n, const HfArch *arch, int64_t seq, SafeTensorFill fill, void *arg,
            char *err, size_t errlen) {
  const HfFamily *f;
  HfBind b = {0};
  if (!arch)
    return file_set_error(err, errlen,
                          "the program does not say its architecture (no \"arch\": compiled "
                          "by an older colossalc)");
  HfArch a = *arch;
  if (family_for_save(ps, n, &a, &f, err, errlen) || arch_fits(f, &a, err, errlen)) return -1;
  int rc = bind_all(f, &b, ps, n, err, errlen);
  free(b.count);
  b.sym['H' - 'A'] = a.heads, b.sym['S' - 'A'] = seq, b.sym['L' - 'A'] = b.layers;
  int64_t D = b.sym['D' - 'A'];
  if (rc == 0 && D % a.heads != 0)
    rc = file_set_error(err, errlen, "the width %" PRId64 " is not a multiple of %" PRId64 " heads", D, a.heads);
  if (rc == 0 && f->grouped && b.sym['K' - 'A'] != D / a.heads * a.kv_heads)
    rc = file_set_error(
        err, errlen, "k_proj and v_proj are %" PRId64 " wide, not %" PRId64 " key/value heads of %" PRId64 " features",
        b.sym['K' - 'A'], a.kv_heads, D / a.heads);
  if (rc != 0 || (!ps[0].data && !fill)) return rc;
  if (make_dir(dir, err, errlen) || write_weights(dir, f, ps, n, fill, arg, err, errlen)) return -1;
  return write_config(dir, f, &b, &a, err, errlen);
}
