/* hf: Hugging Face checkpoints, read and written (docs/checkpoints.md).
 *
 * Reading. A checkpoint is one safetensors file, or the shards that transformers'
 * `save_pretrained` writes beside model.safetensors.index.json ({"metadata": {...},
 * "weight_map": {"tensor name": "shard file name", ...}}, shards in the index's
 * directory). hf_source_open takes a directory (its index, else its
 * model.safetensors), an index, or a .safetensors file, opens every shard
 * (safetensors.h validates each) and checks the index against them: every name it
 * maps is in its shard, every tensor of a shard is mapped to that shard. Tensors are
 * then found by name whatever file holds them.
 *
 * Families. How transformers names a model's tensors differs from the model's own
 * names in a few ways, kept as data per family (hf.c, hf_families): the prefix of
 * the base model ("transformer." before GPT-2's names; LLaMA's "model." is part of
 * models/llama.model's names), an output head that may be tied to the token
 * embedding (written or not), and buffers that are not parameters (GPT-2's causal
 * mask "h.N.attn.bias" and "h.N.attn.masked_bias", LLaMA's rotary "inv_freq"). The
 * layouts need no transposes: models/gpt2.model keeps Conv1D weights [in, out] and
 * models/llama.model nn.Linear weights [out, in], as transformers does; and the
 * `rotary` op pairs x[i] with x[i + hd/2] (rotate_half, ir/interp.h), the
 * convention transformers' LLaMA weights are permuted for, so q_proj and k_proj load
 * as they are. A model belongs to the family whose marker parameter it has
 * (wpe.weight: gpt2; model.embed_tokens.weight: llama).
 *
 * Writing. hf_save writes DIR/model.safetensors (F32, "format": "pt", the names
 * transformers writes) and DIR/config.json for GPT2LMHeadModel or LlamaForCausalLM.
 * The sizes come from the parameters' shapes (matched against the family's table:
 * a parameter the family does not have, or one whose shape disagrees, is an error),
 * the rest from the program's "arch" (program/program.h: heads, norm eps, rotary
 * base, checked against what the family computes: GPT-2 is layernorm with tanh GELU,
 * LLaMA rmsnorm with SiLU and rotary, both causal with the default scale) and seq
 * (LLaMA's max_position_embeddings).
 *
 * Errors: -1 or NULL with a message in err.
 */
#ifndef COLOSSALC_RUNTIME_HF_H
#define COLOSSALC_RUNTIME_HF_H

#include "runtime/io/safetensors.h"

#include <stddef.h>
#include <stdint.h>

/* ---- reading -------------------------------------------------------------------- */

typedef struct HfSource HfSource;

HfSource *hf_source_open(const char *path, char *err, size_t errlen);
void hf_source_close(HfSource *s);
/* The path as given (for messages). */
const char *hf_source_path(const HfSource *s);
/* Tensors of every file, by name: i in [0, count); *file gets the file holding it. */
int hf_source_count(const HfSource *s);
const SafeTensor *hf_source_get(const HfSource *s, int i, const SafeTensors **file);
const SafeTensor *hf_source_find(const HfSource *s, const char *name, const SafeTensors **file);

/* ---- families ------------------------------------------------------------------- */

typedef struct HfFamily HfFamily;

typedef struct HfArch HfArch;
/* The family of a model with these parameter names (and, arch given, its window), or
 * NULL. */
const HfFamily *hf_family_of(const char *const *names, int n, const HfArch *arch);
const char *hf_family_name(const HfFamily *f);

typedef enum HfRole {
  HF_PARAM,  /* a parameter: its model name in the buffer */
  HF_BUFFER, /* a buffer that is not a parameter (skipped) */
} HfRole;
/* A file's tensor name as the model names it (the family's prefix taken off) into
 * out (len bytes; names longer are cut, and then match nothing), and its role. */
HfRole hf_model_name(const HfFamily *f, const char *file_name, char *out, size_t len);
/* The output head and the token embedding it may be tied to. */
const char *hf_family_head(const HfFamily *f);
const char *hf_family_embed(const HfFamily *f);

/* The config.json beside the checkpoint (in its directory), if there is one, against
 * what the model computes (arch: its heads, key/value heads, window, norms' eps,
 * rotary base and scaling, activation; model_ties: it has no output head of its own):
 * 0, or -1 with a message naming the first field that differs. */
int hf_check_config(const HfSource *s, const HfFamily *f, const HfArch *a, int model_ties, char *err, size_t errlen);

/* ---- writing -------------------------------------------------------------------- */

typedef struct HfParam {
  const char *name;
  int ndim;
  const int64_t *shape; /* [ndim] */
  const float *data;    /* [product of shape], or NULL (hf_save's fill, or a check only) */
} HfParam;

/* What the model's ops say (the program's arch fields, ProgStage; or a file's "arch"
 * metadata, tools/export.c). */
struct HfArch {
  int64_t heads;                 /* 0: no attention, -1: the attention ops differ */
  int64_t kv_heads;              /* key/value heads (heads: no grouped-query attention), as heads */
  int64_t window;                /* the keys a query sees; 0: all (causal) ones, -1: the ops differ */
  int causal;                    /* 1: every attention causal */
  int scaled;                    /* some attention has its own scale */
  char norm[16], activation[16]; /* "" when none */
  double norm_eps, rope_theta;   /* 0: none, -1: the ops differ */
  double rope_scaling[4];        /* factor (1: none), low and high frequency factors, original
                                    context (LLaMA 3.1's rope_scaling), each -1 where the ops differ */
};

/* Checks that the parameters and arch (NULL: unknown) make a transformers model, then
 * (fill given, or the parameters' data) writes DIR/model.safetensors and DIR/config.json,
 * atomically, creating DIR: each tensor's data from fill (safetensors.h: params[i]'s
 * elements, a part at a time) or from params[i].data. seq: the program's sequence
 * length. */
int hf_save(const char *dir, const HfParam *params, int n, const HfArch *arch, int64_t seq, SafeTensorFill fill,
            void *arg, char *err, size_t errlen);

#endif
