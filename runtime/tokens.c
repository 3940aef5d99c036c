/* tokens: reading and writing llm.c token files (format and batch layout in
 * tokens.h). The file is validated when opened and then memory-mapped read-only,
 * so a batch read is a copy out of the page cache with no allocation, and files
 * larger than memory work. Header words and tokens are decoded byte by byte as
 * little-endian, so the code does not depend on the host's byte order.
 */
#include "tokens.h"

#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOKENS_HEADER_BYTES (TOKENS_HEADER_INTS * 4)

struct TokenFile {
    char *path;
    unsigned char *map;       /* the whole file, map_len bytes (read-only mapping) */
    size_t map_len;
    int64_t count;            /* tokens after the header */
};

static int32_t le_i32(const unsigned char *p)
{
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    return (int32_t)v;
}

/* Checks the header of a file of `size` bytes; fills *count. */
static int tokens_check_header(const char *path, const unsigned char *h, uint64_t size,
                               int64_t *count, char *err, size_t errlen)
{
    int32_t magic = le_i32(h), version = le_i32(h + 4), n = le_i32(h + 8);
    if (magic != TOKENS_MAGIC)
        return file_set_error(err, errlen,
                              "%s: bad magic %d (expected %d): not an llm.c token file",
                              path, magic, TOKENS_MAGIC);
    if (version != TOKENS_VERSION)
        return file_set_error(err, errlen, "%s: unsupported version %d (expected %d)", path,
                              version, TOKENS_VERSION);
    if (n < 0)
        return file_set_error(err, errlen, "%s: negative token count %d in header", path, n);
    uint64_t want = TOKENS_HEADER_BYTES + 2 * (uint64_t)n;
    if (size < want)
        return file_set_error(err, errlen,
                              "%s: truncated: header says %d tokens (%llu bytes) but the "
                              "file has %llu bytes",
                              path, n, (unsigned long long)want, (unsigned long long)size);
    if (size > want)
        return file_set_error(err, errlen,
                              "%s: %llu unexpected bytes after the %d tokens the header "
                              "declares",
                              path, (unsigned long long)(size - want), n);
    *count = n;
    return 0;
}

/* Maps the open file fd of `size` bytes into tf. */
static int tokens_map(TokenFile *tf, int fd, uint64_t size, char *err, size_t errlen)
{
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        return file_set_error(err, errlen, "%s: cannot map: %s", tf->path, strerror(errno));
    tf->map = m;
    tf->map_len = (size_t)size;
    return 0;
}

static int tokens_load(TokenFile *tf, int fd, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return file_set_error(err, errlen, "%s: cannot stat: %s", tf->path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return file_set_error(err, errlen, "%s: not a regular file", tf->path);
    uint64_t size = (uint64_t)st.st_size;
    if (size < TOKENS_HEADER_BYTES)
        return file_set_error(err, errlen,
                              "%s: truncated: %llu bytes, shorter than the %d-byte header "
                              "of an llm.c token file",
                              tf->path, (unsigned long long)size, TOKENS_HEADER_BYTES);
    if (tokens_map(tf, fd, size, err, errlen) != 0)
        return -1;
    return tokens_check_header(tf->path, tf->map, size, &tf->count, err, errlen);
}

TokenFile *tokens_open(const char *path, char *err, size_t errlen)
{
    TokenFile *tf = calloc(1, sizeof *tf);
    if (!tf || !(tf->path = strdup(path))) {
        free(tf);
        file_set_error(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        file_set_error(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        tokens_close(tf);
        return NULL;
    }
    int rc = tokens_load(tf, fd, err, errlen);
    close(fd);
    if (rc != 0) {
        tokens_close(tf);
        return NULL;
    }
    return tf;
}

void tokens_close(TokenFile *tf)
{
    if (!tf)
        return;
    if (tf->map)
        munmap(tf->map, tf->map_len);
    free(tf->path);
    free(tf);
}

int64_t tokens_count(const TokenFile *tf)
{
    return tf->count;
}

uint16_t tokens_at(const TokenFile *tf, int64_t pos)
{
    if (tf->count == 0)
        return 0;
    int64_t i = pos % tf->count;
    if (i < 0)
        i += tf->count;
    const unsigned char *p = tf->map + TOKENS_HEADER_BYTES + 2 * i;
    return (uint16_t)(p[0] | p[1] << 8);
}

int tokens_check_batch(const TokenFile *tf, int B, int T, int world, char *err, size_t errlen)
{
    if (B <= 0 || T <= 0 || world <= 0)
        return file_set_error(err, errlen,
                              "%s: batch %d, sequence %d and world %d must all be positive",
                              tf->path, B, T, world);
    if (B % world != 0)
        return file_set_error(err, errlen,
                              "%s: global batch %d does not divide over %d data-parallel ranks",
                              tf->path, B, world);
    int64_t need = (int64_t)B * T + 1;
    if (tf->count < need)
        return file_set_error(err, errlen,
                              "%s: %lld tokens, but one step of batch %d x sequence %d needs "
                              "%lld (batch*seq+1)",
                              tf->path, (long long)tf->count, B, T, (long long)need);
    return 0;
}

int tokens_read_batch(const TokenFile *tf, int64_t step, int B, int T, int rank, int world,
                      int32_t *inputs, int32_t *targets, char *err, size_t errlen)
{
    if (tokens_check_batch(tf, B, T, world, err, errlen) != 0)
        return -1;
    if (rank < 0 || rank >= world)
        return file_set_error(err, errlen, "%s: rank %d out of range for world %d", tf->path,
                              rank, world);
    if (step < 0)
        return file_set_error(err, errlen, "%s: negative step %lld", tf->path, (long long)step);
    int64_t n = tf->count, bt = (int64_t)B * T;
    int64_t local = (int64_t)(B / world) * T;
    /* count < 2^31, so these products of residues fit in int64 */
    int64_t start = ((step % n) * (bt % n) + (int64_t)rank * local) % n;
    for (int64_t i = 0; i < local; i++) {
        inputs[i] = tokens_at(tf, start + i);
        targets[i] = tokens_at(tf, start + i + 1);
    }
    return 0;
}

int tokens_write_file(const char *path, const uint16_t *tokens, size_t n, char *err,
                      size_t errlen)
{
    if (n > INT32_MAX)
        return file_set_error(err, errlen,
                              "%s: %zu tokens do not fit the int32 count of a token file",
                              path, n);
    unsigned char header[TOKENS_HEADER_BYTES] = {0};
    int32_t words[3] = {TOKENS_MAGIC, TOKENS_VERSION, (int32_t)n};
    for (int w = 0; w < 3; w++)
        for (int b = 0; b < 4; b++)
            header[4 * w + b] = (unsigned char)((uint32_t)words[w] >> (8 * b));
    unsigned char *body = malloc(2 * n + 1);
    if (!body)
        return file_set_error(err, errlen, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) {
        body[2 * i] = (unsigned char)tokens[i];
        body[2 * i + 1] = (unsigned char)(tokens[i] >> 8);
    }
    const void *chunks[2] = {header, body};
    size_t lens[2] = {sizeof header, 2 * n};
    int rc = file_write_atomic(path, chunks, lens, 2, err, errlen);
    free(body);
    return rc;
}
