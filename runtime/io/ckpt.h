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
 * Checkpoints (--ckpt-dir DIR): a set of shards (shards.h), DIR/ckpt-STEP/, one shard
 * per rank, shard-RRRRR-of-NNNNN.safetensors, each holding the pieces of the state that
 * rank writes (train_mesh.h: mesh_pieces): param/NAME, opt_m/NAME and (AdamW)
 * opt_v/NAME as F32 boxes of the model's global tensors, and on rank 0 fp8/state (F32
 * [states, 2 + history], the same on every rank: their amaxes are reduced over the
 * mesh). index.json, written by rank 0 once every shard is written and read back, holds
 * format "colossalc-checkpoint" and the metadata: version "2", model, optimizer, step
 * (updates done), data_step (next batch index), seed, threads, global_batch (rows per
 * step over all data-parallel ranks), bad_steps, fp16's loss_scale and skipped_steps,
 * ranks, seq and arch. The pieces are whatever the writing plan held, and a reader reads
 * the boxes its own plan needs, so any plan resumes any other's checkpoint. DIR/latest
 * holds the checkpoint's name and a newline, written after the index: `latest` always
 * names a complete checkpoint. A checkpoint of older runs, DIR/ckpt-STEP.safetensors
 * (one file of whole tensors, what colossalc-export --merge writes), reads the same way.
 */
#ifndef COLOSSALC_RUNTIME_TRAIN_CKPT_H
#define COLOSSALC_RUNTIME_TRAIN_CKPT_H

#include "program/program.h"
#include "runtime/io/shards.h"

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
  int64_t bad_steps;    /* updates skipped for a non-finite loss or norm, in a row */
  int ranks;            /* shards of the checkpoint (the ranks that wrote it) */
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
/* --save's file, and --save-hf's DIR/model.safetensors and DIR/config.json (hf.h), from
 * a set of the model's parameters (shards.h, keys the parameters' names), streamed
 * tensor by tensor, a slab of rows at a time. */
int ckpt_save_params_set(const Prog *p, const char *path, ShardSet *s, char *err, size_t errlen);
int ckpt_save_hf_set(const Prog *p, const char *dir, ShardSet *s, char *err, size_t errlen);
/* Before training: the model makes a transformers model, and DIR can be written. */
int ckpt_check_save_hf(const Prog *p, const char *dir, char *err, size_t errlen);

/* Creates DIR if missing and checks that a file can be created in it. */
int ckpt_prepare_dir(const char *dir, char *err, size_t errlen);
/* Checks that a file can be created beside path (--save), before training. */
int ckpt_check_save_path(const char *path, char *err, size_t errlen);

#define CKPT_FORMAT "colossalc-checkpoint"
#define CKPT_FP8 "fp8/state"                            /* fp8's scaling states (CkptMeta) */
#define CKPT_SHARD_FMT "shard-%05d-of-%05d.safetensors" /* rank, ranks */

/* "ckpt-STEP" */
void ckpt_name(char *buf, size_t len, int64_t step);
/* A parameter's piece w filled by its init rule g->init (as ckpt_init_params, by the
 * global index of each element). */
void ckpt_init_piece(const ProgParam *g, const char *name, const ShardPiece *w, uint64_t seed);
/* A set's shard of rank (folder/shard-RRRRR-of-NNNNN.safetensors), then (verify) read
 * back and checked against its checksums; and the set's index of its ranks' shards,
 * format fmt (shards.h). */
int ckpt_write_shard(const char *folder, int rank, int ranks, const ShardPiece *ps, int n, int verify, char *err,
                     size_t errlen);
int ckpt_write_index(const char *folder, int ranks, const char *fmt, const char *const keys[], const char *const vals[],
                     int nmeta, char *err, size_t errlen);
/* This rank's shard of checkpoint STEP (DIR/ckpt-STEP/, created), then (verify) read back
 * and checked against its checksums. */
int ckpt_save_shard(const char *dir, int64_t step, int rank, int ranks, const ShardPiece *ps, int n, int verify,
                    char *err, size_t errlen);
/* Rank 0, once every shard is written: the index of checkpoint m->step of model p (its
 * m->ranks shards), then DIR/latest; then, keep > 0, removes all but the newest keep
 * checkpoints. */
int ckpt_commit(const Prog *p, const char *dir, const CkptMeta *m, int keep, char *err, size_t errlen);
/* Removes what was written of checkpoint STEP (a save that failed on some rank). */
void ckpt_discard(const char *dir, int64_t step);
/* The checkpoints to try, best first: the one DIR/latest names, then the others newest
 * first (names into out, at most max). The count, or -1 with a message (none). */
int ckpt_candidates(const char *dir, char out[][64], int max, char *err, size_t errlen);
/* Checkpoint DIR/NAME of model p opened, its metadata into *m. NULL with a message. */
ShardSet *ckpt_open(const Prog *p, const char *dir, const char *name, CkptMeta *m, char *err, size_t errlen);
int ckpt_check_meta(const Prog *p, const ShardSet *st, const char *path, CkptMeta *m, char *err, size_t errlen);
/* fp8's states into m->fp8 when the checkpoint holds them in that shape (fp8_restored). */
int ckpt_read_fp8(ShardSet *s, CkptMeta *m, char *err, size_t errlen);

#endif
