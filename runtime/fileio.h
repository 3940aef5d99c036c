/* fileio: whole-file reads and crash-safe whole-file writes for the runtime.
 *
 * Checkpoints and token files are written with file_write_atomic: the bytes go to
 * a temporary file "<path>.tmp.<pid>" in the same directory, which is flushed to
 * disk and then renamed over <path>, and the directory is synced. A reader thus
 * sees either the old file or the complete new one, never a truncated one; on any
 * failure the temporary file is removed and <path> is left as it was.
 *
 * Errors: functions return -1 (or NULL) and write a one-line message naming the
 * file and the reason (strerror) into the caller's err buffer (errlen bytes).
 */
#ifndef COLOSSALC_RUNTIME_FILEIO_H
#define COLOSSALC_RUNTIME_FILEIO_H

#include <stddef.h>

/* Writes the concatenation of n chunks (chunks[i] holds lens[i] bytes) to path,
 * atomically as described above. Returns 0, or -1 with a message in err. */
int file_write_atomic(const char *path, const void *chunks[], const size_t lens[], int n,
                      char *err, size_t errlen);

/* Reads a whole file into a malloc'd buffer (one extra NUL byte after the data,
 * not counted in *len). Returns the buffer (caller frees), or NULL with a message. */
void *file_read_all(const char *path, size_t *len, char *err, size_t errlen);

/* Formats a message into err (if err and errlen are non-zero); returns -1 so
 * callers can write `return file_set_error(err, errlen, ...)`. */
int file_set_error(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
