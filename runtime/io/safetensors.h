/* safetensors: the checkpoint format of `train` (and how a Hugging Face GPT-2 file
 * is loaded as initial weights).
 *
 * A safetensors file is: N (8 bytes, little-endian uint64), N bytes of a JSON
 * object {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
 * ..., "__metadata__": {"key": "value", ...}} (metadata optional), then the data
 * section; offsets are relative to the start of the data section, little-endian.
 *
 * The reader validates the whole header when the file is opened (header inside
 * the file, well-formed JSON object, known dtypes, integer shapes, offsets inside
 * the data section and equal to dtype size x element count, no overflow, no two
 * tensors overlapping, no duplicate names, metadata values are strings), so a file
 * that opens can be read without further checks. Gaps between tensors are
 * accepted. Integers in the header must be at most 2^53 (JSON numbers are read as
 * doubles). The file is memory-mapped, not copied.
 *
 * Errors: functions return NULL or -1 and put a message naming the file and the
 * tensor into the caller's err buffer.
 */
#ifndef COLOSSALC_RUNTIME_SAFETENSORS_H
#define COLOSSALC_RUNTIME_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/* The dtypes of the safetensors spec: X(enum suffix, name in the header, bytes). */
#define ST_DTYPES(X)       \
  X(BOOL, "BOOL", 1)       \
  X(U8, "U8", 1)           \
  X(I8, "I8", 1)           \
  X(F8_E5M2, "F8_E5M2", 1) \
  X(F8_E4M3, "F8_E4M3", 1) \
  X(F8_E8M0, "F8_E8M0", 1) \
  X(I16, "I16", 2)         \
  X(U16, "U16", 2)         \
  X(F16, "F16", 2)         \
  X(BF16, "BF16", 2)       \
  X(I32, "I32", 4)         \
  X(U32, "U32", 4)         \
  X(F32, "F32", 4)         \
  X(I64, "I64", 8)         \
  X(U64, "U64", 8)         \
  X(F64, "F64", 8)         \
  X(C64, "C64", 8)

typedef enum StDtype {
#define ST_DTYPE_ENUM(e, name, size) ST_DTYPE_##e,
  ST_DTYPES(ST_DTYPE_ENUM) /* ST_DTYPE_BOOL, ... */
#undef ST_DTYPE_ENUM
  ST_DTYPE_COUNT
} StDtype;

#define ST_MAX_DIMS 8

/* Checksums: every file the writers below write carries, for each tensor with data,
 * metadata "crc32c:NAME" = the CRC-32C (crc32c.h) of each ST_CRC_BLOCK bytes of its data
 * in order (the last block shorter), as 8 lowercase hex digits each. Readers check the
 * blocks they read (safetensors_read_f32*, safetensors_verify); files without the
 * metadata (written by other tools) read unchecked. */
#define ST_CRC_KEY "crc32c:"
#define ST_CRC_BLOCK ((uint64_t)1 << 20)
/* The writers' buffer when the data comes from a fill function (bytes). */
#define ST_WRITE_BUFFER ((size_t)64 << 20)

typedef struct SafeTensor {
  const char *name;
  StDtype dtype;
  int ndim;
  int64_t shape[ST_MAX_DIMS]; /* [ndim] */
  int64_t numel;              /* product of shape (1 for a scalar, shape []) */
  uint64_t begin, end;        /* byte range in the data section */
  const char *crc;            /* its checksums' hex text, or NULL (none in the file) */
} SafeTensor;

typedef struct SafeTensors SafeTensors;

/* What the writer takes: one F32 tensor. */
typedef struct SafeTensorOut {
  const char *name;
  int ndim;
  const int64_t *shape; /* [ndim] */
  const float *data;    /* [product of shape] */
} SafeTensorOut;

const char *safetensors_dtype_name(StDtype dt);
int safetensors_dtype_size(StDtype dt);
/* "[768,2304]" into buf (len bytes), for messages. */
void safetensors_shape_text(char *buf, size_t len, int ndim, const int64_t *shape);

/* Opens and validates a file. NULL with a message on error. */
SafeTensors *safetensors_open(const char *path, char *err, size_t errlen);
void safetensors_close(SafeTensors *st);

/* Tensors in header order: i in [0, count). */
int safetensors_count(const SafeTensors *st);
const SafeTensor *safetensors_get(const SafeTensors *st, int i);
/* The tensor called name, or NULL. */
const SafeTensor *safetensors_find(const SafeTensors *st, const char *name);
/* The raw little-endian bytes of t (t->end - t->begin of them). */
const void *safetensors_raw(const SafeTensors *st, const SafeTensor *t);

/* Where the data section starts in the file (8 + the header's length): a tensor's
 * bytes are at this + t->begin, for pread. */
uint64_t safetensors_data_offset(const SafeTensors *st);
/* Block b's recorded CRC (t->crc not NULL); and a check of block b's bytes (the block's
 * length of them) against it: 0, or -1 with "PATH: tensor 'NAME': checksum mismatch
 * in bytes [lo, hi) ...". No checksum recorded: 0. */
uint32_t safetensors_block_crc(const SafeTensor *t, int64_t b);
int safetensors_check_block(const char *path, const SafeTensor *t, int64_t b, const void *bytes, char *err,
                            size_t errlen);
/* Every block of t checked. */
int safetensors_verify(const SafeTensors *st, const SafeTensor *t, char *err, size_t errlen);

/* Metadata: value of key or NULL; and the i-th pair, i in [0, count). */
const char *safetensors_metadata(const SafeTensors *st, const char *key);
int safetensors_metadata_count(const SafeTensors *st);
void safetensors_metadata_at(const SafeTensors *st, int i, const char **key, const char **value);

/* Converts elements [first, first+n) of t (flat, row-major) to f32 into dst.
 * F32 is copied, BF16 and F16 are widened exactly; other dtypes are an error. */
int safetensors_read_f32_range(const SafeTensors *st, const SafeTensor *t, int64_t first, int64_t n, float *dst,
                               char *err, size_t errlen);
/* The whole tensor: n must equal t->numel. */
int safetensors_read_f32(const SafeTensors *st, const SafeTensor *t, float *dst, int64_t n, char *err, size_t errlen);

/* Writes n F32 tensors (in that order, header padded to 8 bytes) and nmeta
 * metadata pairs, with their checksums, to path, atomically (see fileio.h). 0 or -1
 * with a message. */
int safetensors_write(const char *path, const SafeTensorOut *tensors, int n, const char *const meta_keys[],
                      const char *const meta_values[], int nmeta, char *err, size_t errlen);

/* The same, streamed: tensors whose data is NULL come from fill, a part at a time
 * (elements [first, first + n) of tensor i into dst, n at most buf_bytes / 4; 0, or -1
 * with a message), through one buffer of buf_bytes (rounded to whole checksum blocks):
 * the whole file never sits in memory. */
typedef int (*SafeTensorFill)(void *arg, int i, int64_t first, int64_t n, float *dst, char *err, size_t errlen);
int safetensors_write_stream(const char *path, const SafeTensorOut *tensors, int n, const char *const meta_keys[],
                             const char *const meta_values[], int nmeta, SafeTensorFill fill, void *arg,
                             size_t buf_bytes, char *err, size_t errlen);

#endif
