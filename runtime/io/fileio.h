/* fileio: whole-file reads, crash-safe whole-file writes and read-only maps for the runtime.
 *
 * Checkpoints and data files are written with file_write_atomic: the bytes go to
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
#include <stdint.h>

/* Writes the concatenation of n chunks (chunks[i] holds lens[i] bytes) to path,
 * atomically as described above. Returns 0, or -1 with a message in err. */
int file_write_atomic(const char *path, const void *chunks[], const size_t lens[], int n, char *err, size_t errlen);

/* The same for a file written in place (pwrite) before it appears: file_temp_open
 * creates "<path>.tmp.<pid>" (fd, read-write); file_temp_commit fsyncs, closes and renames
 * it over path and syncs the directory; file_temp_abandon (or a failed commit) removes
 * it. 0, or -1 with a message. */
typedef struct FileTemp {
  int fd;
  char *path, *tmp;
} FileTemp;
int file_temp_open(FileTemp *f, const char *path, char *err, size_t errlen);
int file_temp_commit(FileTemp *f, char *err, size_t errlen);
void file_temp_abandon(FileTemp *f);

/* Creates dir and every missing folder above it (mkdir -p). 0, or -1 with "cannot
 * create PATH: reason" naming the first that could not be made. */
int file_make_dirs(const char *dir, char *err, size_t errlen);

/* Removes a folder and the files in it (one level: a checkpoint's shards), or the file
 * at path; what cannot be removed stays. */
void file_remove_dir(const char *path);

/* pwrite / pread of exactly len bytes at off, retrying short calls and EINTR. 0, or -1
 * with errno set (EIO: the file ended first). */
int file_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);
int file_pread_full(int fd, void *buf, size_t len, uint64_t off);

/* Reads a whole file into a malloc'd buffer (one extra NUL byte after the data,
 * not counted in *len). Returns the buffer (caller frees), or NULL with a message. */
void *file_read_all(const char *path, size_t *len, char *err, size_t errlen);

/* A whole regular file mapped read-only: how the data files are read (tokens.h,
 * records.h), so a batch is a copy out of the page cache and files larger than
 * memory work. */
typedef struct FileMap {
  const unsigned char *data; /* [len], NULL when unmapped */
  size_t len;
} FileMap;

/* Maps path. A file shorter than min_len bytes is refused: "PATH: truncated: N bytes,
 * shorter than the MIN_LEN-byte header of WHAT". 0, or -1 with a message. */
int file_map(const char *path, size_t min_len, const char *what, FileMap *m, char *err, size_t errlen);
void file_unmap(FileMap *m);

/* Little-endian 32-bit words, whatever the host's byte order. */
uint32_t file_le32(const unsigned char *p);
void file_put_le32(unsigned char *p, uint32_t v);

/* Formats a message into err (if err and errlen are non-zero); returns -1 so
 * callers can write `return file_set_error(err, errlen, ...)`. */
int file_set_error(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
