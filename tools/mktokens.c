/* colossalc-mktokens: turns any file (UTF-8 text or not) into an llm.c token file
 * with byte-level tokens: token i is the value (0..255) of byte i of the input.
 * This is how the README's demo makes training data without a tokenizer; a model
 * trained on it needs a vocabulary of at least 256.
 *
 *     colossalc-mktokens input.txt tokens.bin
 */
#include "runtime/io/fileio.h"
#include "runtime/io/tokens.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int mktokens_usage(FILE *f, int rc) {
  fprintf(f, "usage: colossalc-mktokens INPUT OUTPUT\n"
             "  writes OUTPUT as an llm.c token file with one token per byte of INPUT\n");
  return rc;
}

static int mktokens_convert(const char *in, const char *out) {
  char err[512];
  size_t n = 0;
  unsigned char *bytes = file_read_all(in, &n, err, sizeof err);
  if (!bytes) {
    fprintf(stderr, "colossalc-mktokens: %s\n", err);
    return 1;
  }
  uint16_t *toks = malloc((n ? n : 1) * sizeof *toks);
  int rc = 1;
  if (!toks) {
    fprintf(stderr, "colossalc-mktokens: out of memory for %zu tokens\n", n);
  } else {
    for (size_t i = 0; i < n; i++) toks[i] = bytes[i];
    if (tokens_write_file(out, toks, n, err, sizeof err) != 0) fprintf(stderr, "colossalc-mktokens: %s\n", err);
    else rc = 0, printf("colossalc-mktokens: wrote %zu tokens to %s\n", n, out);
  }
  free(toks);
  free(bytes);
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) return mktokens_usage(stdout, 0);
  if (argc != 3) return mktokens_usage(stderr, 2);
  return mktokens_convert(argv[1], argv[2]);
}
