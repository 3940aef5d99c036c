/* io/ckpt: parameters and checkpoints on disk, as safetensors (safetensors.h).
 *
 * Host views: every function takes the PARAMS tier (and the OPT tier) as host
 * memory laid out as in the program (parameter at ProgParam.offset; AdamW m at
 * offset, v at opt_v_offset + offset).
 *
 * Parameter files (--init-from, --save): one tensor per parameter, named as in
 * the program (--save: F32, metadata format "pt", model, and the program's "arch"
 * and seq, which colossalc-export reads). Loading requires exactly the program's set:
 * missing, unexpected and mis-shaped tensors and dtypes that do not load are all
 * listed in one message; F32, BF16 and F16 load. --init-from also takes what
 * transformers writes (runtime/io/hf.h): a directory, an index and its shards or one
 * file; for a model of a known family (gpt2, llama) with transformers' names, the
 * buffers that are not parameters skipped, and an output head tied or not.
 *
 * Hugging Face directories (--save-hf): model.safetensors and config.json that
 * transformers' from_pretrained loads (hf_save).
 *
 * Checkpoints (--ckpt-dir DIR): DIR/ckpt-STEP.safetensors holds param/NAME,
 * opt_m/NAME and (AdamW) opt_v/NAME as F32, and metadata format
 * "colossalc-checkpoint", version "1", model, optimizer, step (updates done),
 * data_step (next batch index), seed, threads, global_batch (rows per step over all
 * data-parallel ranks; absent in older files), and under fp8 the delayed-scaling
 * states as fp8/state (F32 [states, 2 + history], the same on every rank: their
 * amaxes are reduced over the mesh). The file is the same whatever the
 * number of ranks and the ZeRO stage that wrote it. DIR/latest holds the file name
 * and a newline. Both are written atomically (fileio.h), checkpoint first, so
 * `latest` always names a complete file.
 */
#ifndef COLOSSALC_RUNTIME_TRAIN_CKPT_H
#define COLOSSALC_RUNTIME_TRAIN_CKPT_H

#include "program/program.h"

#include <stddef.h>
#include <stdint.h>

typedef struct CkptMeta {
  int64_t step;      /* updates done */
  int64_t data_step; /* index of the next training batch */
  uint64_t seed;
  int64_t threads;
  int64_t global_batch; /* 0: not recorded */
  double loss_scale;    /* fp16: the next step's loss scale (0: not recorded) */
  int64_t skipped;      /* fp16: steps skipped for an inf or NaN gradient */
  /* fp8 (ProgStage fp8_*): the scaling states, fp8_rows x fp8_width f32 on the host, or
   * NULL. Saved as "fp8/state"; a resume fills them and sets fp8_restored when the file
   * holds states of that shape (a file without them, or of another history, leaves
   * them alone: the caller says the scales start again). */
  float *fp8;
  int64_t fp8_rows, fp8_width;
  int fp8_restored;
} CkptMeta;

/* Fills every parameter (held: those with held[i], NULL: all) by its init rule, Philox
 * keyed by (seed, name) (philox.h): normal(std a, mean b), uniform [a, b), zeros, ones,
 * constant a. */
void ckpt_init_params(const Prog *p, char *params, uint64_t seed, const unsigned char *held);

/* note (notelen bytes, may be NULL): "" or one line saying what was skipped or tied. */
int ckpt_load_params(const Prog *p, const char *path, char *params, char *note, size_t notelen, char *err,
                     size_t errlen);
int ckpt_save_params(const Prog *p, const char *path, const char *params, char *err, size_t errlen);
/* DIR/model.safetensors and DIR/config.json (hf.h); params NULL: only the checks. */
int ckpt_save_hf(const Prog *p, const char *dir, const char *params, char *err, size_t errlen);
/* Before training: the model makes a transformers model, and DIR can be written. */
int ckpt_check_save_hf(const Prog *p, const char *dir, char *err, size_t errlen);

/* Creates DIR if missing and checks that a file can be created in it. */
int ckpt_prepare_dir(const char *dir, char *err, size_t errlen);
/* Checks that a file can be created beside path (--save), before training. */
int ckpt_check_save_path(const char *path, char *err, size_t errlen);

int ckpt_save(const Prog *p, const char *dir, const CkptMeta *m, const char *params, const char *opt, char *err,
              size_t errlen);
/* Restores the checkpoint DIR/latest names into params, opt and *m; the optimizer
 * state of parameter i only where opt_held[i] (NULL: every parameter; ZeRO ranks
 * read their own shard), though the file must hold all of it. */
int ckpt_load_latest(const Prog *p, const char *dir, CkptMeta *m, char *params, char *opt,
                     const unsigned char *opt_held, char *err, size_t errlen);

#endif
