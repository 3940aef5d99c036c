/* train_sample: `train --sample N`, text from the trained model.
 *
 * The context starts with one token, the first of --data (0 without data), which
 * is not printed. Each draw writes the last min(len, seq) context tokens into row
 * 0 of the token input at positions 0.., the rest of the batch 0, runs `forward`,
 * and takes the logits at the last filled position (a causal model ignores the
 * padding after it). The token is drawn from softmax(logits) (temperature 1, in
 * double) by inverting the CDF at philox_uniform(key(seed, "sample"), draw), so a
 * seed gives the same text every time. A 256-token vocabulary prints raw bytes,
 * any other prints ids separated by spaces. Output: a line
 * "--- sample (N tokens) ---", the N tokens, a newline.
 */
#include "runtime/train_loop.h"

#include "runtime/offload.h"
#include "runtime/philox.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

/* Index drawn from softmax(logits[0..n)) at uniform u in (0,1). */
static int64_t sample_softmax(const float *logits, int64_t n, double u) {
  double max = -INFINITY, sum = 0, acc = 0;
  for (int64_t i = 0; i < n; i++) max = logits[i] > max ? logits[i] : max;
  for (int64_t i = 0; i < n; i++) sum += exp((double)logits[i] - max);
  for (int64_t i = 0; i < n; i++) {
    acc += exp((double)logits[i] - max) / sum;
    if (u < acc) return i;
  }
  return n - 1; /* rounding left acc just below 1 */
}

/* Logits of the next token after context[0..len): the context in row 0 of the token
 * input's first micro-batch, the rest zeros, the program's `forward`. */
static void sample_logits(Trainer *t, int64_t len) {
  const Prog *p = t->prog;
  const ProgStage *s = p->s;
  char *tokens = t->rows[s->tokens]; /* a language model's alone (trainer_init checks) */
  memset(tokens, 0, (size_t)(s->batch * s->seq) * 4);
  memcpy(tokens, t->context, (size_t)len * sizeof *t->context);
  exec_scalars(&t->ex, 0.0, 1, 1.0);
  exec_run(&t->ex, prog_list(p, PROG_LIST_FORWARD));
  int size = isa_dtype_bytes((IsaDtype)s->logits_dtype);
  exec_read(&t->ex, TIER_WORK, s->logits_offset + (len - 1) * s->vocab * size, t->logits_row, s->vocab * size);
  if (size == 2) { /* 16-bit logits, widened in place from the end (element i's bytes come after i's float) */
    const unsigned short *h = (const unsigned short *)t->logits_row;
    for (int64_t i = s->vocab - 1; i >= 0; i--) t->logits_row[i] = isa_to_f32((IsaDtype)s->logits_dtype, h[i]);
  }
}

static void sample_emit(FILE *out, int64_t tok, int64_t vocab, int64_t i) {
  if (vocab == 256) fputc((int)tok, out);
  else fprintf(out, "%s%" PRId64, i ? " " : "", tok);
}

static int sample_tokens(Trainer *t, int64_t n, FILE *out);

/* An offload program samples with every parameter brought to the device for the
 * time (trainer_init checked that they fit), then sent home again. */
int trainer_sample(Trainer *t, int64_t n, FILE *out, char *err, size_t errlen) {
  if (t->ex.off && offload_params_to_device(t->ex.off, err, errlen) != 0) return -1;
  int rc = sample_tokens(t, n, out);
  if (t->ex.off && offload_home(t->ex.off, "sampling", err, errlen) != 0) return -1;
  return rc;
}

static int sample_tokens(Trainer *t, int64_t n, FILE *out) {
  const ProgStage *p = t->prog->s;
  uint32_t key[2];
  int64_t len = 1;
  int32_t first = t->data ? data_first_token(t->data) : 0;
  philox_key_derive(t->seed, "sample", key);
  t->context[0] = first < p->vocab ? first : 0;
  fprintf(out, "--- sample (%" PRId64 " tokens) ---\n", n);
  for (int64_t i = 0; i < n; i++) {
    sample_logits(t, len);
    int64_t tok = sample_softmax(t->logits_row, p->vocab, philox_uniform(key, (uint64_t)i));
    sample_emit(out, tok, p->vocab, i);
    if (len == p->seq) memmove(t->context, t->context + 1, (size_t)(len - 1) * sizeof *t->context);
    else len++;
    t->context[len - 1] = (int32_t)tok;
  }
  fputc('\n', out);
  return fflush(out) == 0 ? 0 : -1;
}
