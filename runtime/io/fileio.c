/* fileio: whole-file reads, atomic whole-file writes (temp file, fsync, rename,
 * directory fsync) and read-only maps. The writes serve the data-file and safetensors
 * writers, so a crash or a full disk during a checkpoint never leaves a truncated file
 * at the final path; the maps are how train reads its data files (tokens.c, records.c).
 * Nothing here exits or prints: every failure is returned with a message.
 */
#include "runtime/io/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int file_set_error(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* Writes len bytes, retrying on short writes and EINTR. Returns 0 or -1 (errno set). */
static int fd_write_full(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    if (w == 0) {
      errno = EIO;
      return -1;
    }
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* fsyncs the directory holding path, so the rename itself is durable. File
 * systems that cannot sync a directory (EINVAL) are accepted. */
static int dir_sync_parent(const char *path, char *err, size_t errlen) {
  char *copy = strdup(path);
  if (!copy) return file_set_error(err, errlen, "%s: out of memory", path);
  const char *dir = dirname(copy);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int rc = 0;
  if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
    rc = file_set_error(err, errlen, "%s: written, but syncing directory %s failed: %s", path, dir, strerror(errno));
  if (fd >= 0) close(fd);
  free(copy);
  return rc;
}

int file_temp_open(FileTemp *f, const char *path, char *err, size_t errlen) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  if (!path || !*path) return file_set_error(err, errlen, "file_temp_open: no path");
  size_t tlen = strlen(path) + 32;
  if (!(f->path = strdup(path)) || !(f->tmp = malloc(tlen))) {
    file_temp_abandon(f);
    return file_set_error(err, errlen, "%s: out of memory", path);
  }
  snprintf(f->tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
  f->fd = open(f->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (f->fd < 0) {
    file_set_error(err, errlen, "%s: cannot create temporary file %s: %s", path, f->tmp, strerror(errno));
    file_temp_abandon(f);
    return -1;
  }
  return 0;
}

void file_temp_abandon(FileTemp *f) {
  if (f->fd >= 0) close(f->fd);
  if (f->tmp) unlink(f->tmp);
  free(f->path), free(f->tmp);
  memset(f, 0, sizeof *f);
  f->fd = -1;
}

int file_temp_commit(FileTemp *f, char *err, size_t errlen) {
  int rc = 0;
  if (fsync(f->fd) != 0) rc = file_set_error(err, errlen, "%s: fsync failed: %s", f->tmp, strerror(errno));
  if (close(f->fd) != 0 && rc == 0) rc = file_set_error(err, errlen, "%s: close failed: %s", f->tmp, strerror(errno));
  f->fd = -1;
  if (rc == 0 && rename(f->tmp, f->path) != 0)
    rc = file_set_error(err, errlen, "%s: rename from %s failed: %s", f->path, f->tmp, strerror(errno));
  if (rc == 0) {
    free(f->tmp); /* renamed: nothing left to remove */
    f->tmp = NULL;
    rc = dir_sync_parent(f->path, err, errlen);
  }
  file_temp_abandon(f);
  return rc;
}

int file_make_dirs(const char *dir, char *err, size_t errlen) {
  char *p = strdup(dir);
  if (!p) return file_set_error(err, errlen, "out of memory");
  int rc = 0;
  for (char *s = p + 1; rc == 0; s++) { /* each prefix ending at a '/', then the whole */
    if (*s && (*s != '/' || s[-1] == '/')) continue;
    char c = *s;
    *s = 0;
    struct stat sb;
    if (mkdir(p, 0777) != 0 && errno != EEXIST)
      rc = file_set_error(err, errlen, "cannot create %s: %s", p, strerror(errno));
    else if (!c && (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode)))
      rc = file_set_error(err, errlen, "%s: not a directory", p);
    *s = c;
    if (!c) break;
  }
  free(p);
  return rc;
}

void file_remove_dir(const char *path) {
  DIR *d = opendir(path);
  for (struct dirent *e; d && (e = readdir(d));) {
    char *f;
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || asprintf(&f, "%s/%s", path, e->d_name) < 0) continue;
    unlink(f);
    free(f);
  }
  if (d) closedir(d), rmdir(path);
  else unlink(path);
}

int file_pwrite_full(int fd, const void *buf, size_t len, uint64_t off) {
  const char *p = buf;
  while (len > 0) {
    ssize_t w = pwrite(fd, p, len, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    if (w == 0) {
      errno = EIO;
      return -1;
    }
    p += w, off += (uint64_t)w;
    len -= (size_t)w;
  }
  return 0;
}

int file_pread_full(int fd, void *buf, size_t len, uint64_t off) {
  char *p = buf;
  while (len > 0) {
    ssize_t r = pread(fd, p, len, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) {
      errno = EIO; /* shorter than it said */
      return -1;
    }
    p += r, off += (uint64_t)r;
    len -= (size_t)r;
  }
  return 0;
}

int file_write_atomic(const char *path, const void *chunks[], const size_t lens[], int n, char *err, size_t errlen) {
  if (!path || !*path || n < 0 || (n > 0 && (!chunks || !lens)))
    return file_set_error(err, errlen, "file_write_atomic: invalid arguments");
  FileTemp f;
  if (file_temp_open(&f, path, err, errlen) != 0) return -1;
  for (int i = 0; i < n; i++)
    if (lens[i] && fd_write_full(f.fd, chunks[i], lens[i]) != 0) {
      file_set_error(err, errlen, "%s: write failed: %s", f.tmp, strerror(errno));
      file_temp_abandon(&f);
      return -1;
    }
  return file_temp_commit(&f, err, errlen);
}

/* Reads exactly len bytes from fd into buf. Returns 0, or -1 (errno set; EIO when
 * the file turned out shorter than its size said). */
static int fd_read_full(int fd, char *buf, size_t len) {
  while (len > 0) {
    ssize_t r = read(fd, buf, len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) {
      errno = EIO;
      return -1;
    }
    buf += r;
    len -= (size_t)r;
  }
  return 0;
}

void *file_read_all(const char *path, size_t *len, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    file_set_error(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  char *buf = NULL;
  if (fstat(fd, &st) != 0) {
    file_set_error(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    file_set_error(err, errlen, "%s: not a regular file", path);
  } else if ((uint64_t)st.st_size >= SIZE_MAX || !(buf = malloc((size_t)st.st_size + 1))) {
    file_set_error(err, errlen, "%s: out of memory reading %lld bytes", path, (long long)st.st_size);
  } else if (fd_read_full(fd, buf, (size_t)st.st_size) != 0) {
    file_set_error(err, errlen, "%s: read failed: %s", path, strerror(errno));
    free(buf);
    buf = NULL;
  } else {
    buf[st.st_size] = '\0';
    if (len) *len = (size_t)st.st_size;
  }
  close(fd);
  return buf;
}

/* Maps the open regular file fd of `size` bytes into m. */
static int fd_map(int fd, const char *path, uint64_t size, size_t min_len, const char *what, FileMap *m, char *err,
                  size_t errlen) {
  if (size < min_len)
    return file_set_error(err, errlen,
                          "%s: truncated: %llu bytes, shorter than the %zu-byte "
                          "header of %s",
                          path, (unsigned long long)size, min_len, what);
  if (size > SIZE_MAX) return file_set_error(err, errlen, "%s: too large to map", path);
  void *p = size ? mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
  if (p == MAP_FAILED) return file_set_error(err, errlen, "%s: cannot map: %s", path, strerror(errno));
  m->data = p, m->len = (size_t)size;
  return 0;
}

int file_map(const char *path, size_t min_len, const char *what, FileMap *m, char *err, size_t errlen) {
  m->data = NULL, m->len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return file_set_error(err, errlen, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  int rc;
  if (fstat(fd, &st) != 0) rc = file_set_error(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode)) rc = file_set_error(err, errlen, "%s: not a regular file", path);
  else rc = fd_map(fd, path, (uint64_t)st.st_size, min_len, what, m, err, errlen);
  close(fd);
  return rc;
}

void file_unmap(FileMap *m) {
  if (m->data) munmap((void *)m->data, m->len);
  m->data = NULL, m->len = 0;
}

uint32_t file_le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void file_put_le32(unsigned char *p, uint32_t v) {
  for (int b = 0; b < 4; b++) p[b] = (unsigned char)(v >> 8 * b);
}
