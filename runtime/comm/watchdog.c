/* watchdog: the thread that ends the job when a rank dies or stalls (see the header).
 *
 * Messages are WdMsg records of 32 bytes on TCP streams, each peer's stream read into its
 * own buffer. Rank 0 keeps one WdPeer per rank (its own from watchdog_progress); every
 * other rank keeps one, of rank 0. Sends never block (MSG_DONTWAIT: a stopped peer's
 * full buffer loses beats, which is what silence means) nor raise SIGPIPE.
 */
#include "runtime/comm/watchdog.h"

#include "runtime/io/fileio.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

WatchdogProgress watchdog_progress;

enum { WD_POLL_MS = 100, WD_CONNECT_MS = 60000 };
typedef enum WdKind { WD_HELLO = 1, WD_BEAT, WD_BYE, WD_DIED, WD_STALLED } WdKind;

typedef struct WdMsg {
  int32_t kind, rank; /* a verdict's rank is the failed one */
  int64_t step;
  uint64_t count;
  int32_t in_comm, timed;
} WdMsg;

typedef struct WdPeer {
  int fd;                  /* -1: rank 0's own entry, or closed */
  int bye;                 /* ended normally: not judged */
  char buf[sizeof(WdMsg)]; /* a message being read */
  size_t have;
  WdMsg last;                /* its last beat */
  double beat_ms, change_ms; /* when it last beat, when its count last changed */
} WdPeer;

typedef struct Watchdog {
  int rank, size;
  double timeout_ms; /* 0: no stall timeout */
  WdPeer *peers;     /* rank 0: [size]; others: [1], rank 0 */
  int wake[2];       /* watchdog_stop writes to wake[1] */
  pthread_t thread;
  int running;
  _Atomic int quiet; /* watchdog_quit: this rank fails by itself, the thread judges no more */
  double sent_ms;
} Watchdog;

static Watchdog wd = {.wake = {-1, -1}};
static pthread_mutex_t wd_send_lock = PTHREAD_MUTEX_INITIALIZER;

static double wd_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One message, whole or not at all: a stream cut inside a message would lose the rest.
 * A full buffer (the peer has not read for a long time: it is stopped) drops it; a
 * message begun is finished, waiting up to a second for room. Both threads send (the
 * main thread at each step), one at a time. */
static void wd_send(WdPeer *p, const WdMsg *m) {
  pthread_mutex_lock(&wd_send_lock);
  int fd = p->bye ? -1 : p->fd;
  ssize_t n = fd >= 0 ? send(fd, m, sizeof *m, MSG_DONTWAIT | MSG_NOSIGNAL) : -1;
  for (size_t done = n > 0 ? (size_t)n : 0; n > 0 && done<sizeof *m; done += n> 0 ? (size_t)n : 0) {
    struct pollfd w = {fd, POLLOUT, 0};
    if (poll(&w, 1, 1000) <= 0) break;
    n = send(fd, (const char *)m + done, sizeof *m - done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) break;
  }
  pthread_mutex_unlock(&wd_send_lock);
}

/* This rank's state as a message of kind. */
static WdMsg wd_self(int kind) {
  WatchdogProgress *p = &watchdog_progress;
  return (WdMsg){kind,
                 wd.rank,
                 atomic_load_explicit(&p->step, memory_order_relaxed),
                 atomic_load_explicit(&p->count, memory_order_relaxed),
                 atomic_load_explicit(&p->in_comm, memory_order_relaxed),
                 atomic_load_explicit(&p->timed, memory_order_relaxed)};
}

/* Prints the verdict's line and ends this process (the main thread may be in MPI). */
_Noreturn static void wd_die(const WdMsg *v) {
  char line[256];
  int n = v->kind == WD_DIED ? snprintf(line, sizeof line, "train: rank %d died at step %" PRId64 "; stopping\n",
                                        (int)v->rank, v->step)
                             : snprintf(line, sizeof line,
                                        "train: rank %d stalled at step %" PRId64 ": no progress for %" PRIu64
                                        " s (--collective-timeout)\n",
                                        (int)v->rank, v->step, v->count);
  (void)!write(2, line, (size_t)n);
  if (wd.rank != 0) { /* rank 0, if it runs again (SIGCONT), is not to report this one */
    WdMsg bye = wd_self(WD_BYE);
    wd_send(&wd.peers[0], &bye);
  }
  _exit(1);
}

/* The step a failed rank was in: its last beat's, or this rank's own when later (a rank's
 * last beats may be lost with its connection; no rank is a whole step ahead of another). */
static int64_t wd_step_of(const WdPeer *p) {
  int64_t mine = atomic_load_explicit(&watchdog_progress.step, memory_order_relaxed);
  return p->last.step > mine ? p->last.step : mine;
}

/* Rank 0: every rank told (secs: of no progress, for a stall), then this one ends. */
_Noreturn static void wd_judge(int kind, int rank, double secs) {
  WdMsg v = {kind, rank, wd_step_of(&wd.peers[rank]), (uint64_t)(secs + 0.5), 0, 0};
  for (int r = 1; r < wd.size; r++) /* the failed rank too: were it to run again, it stops */
    wd_send(&wd.peers[r], &v);
  wd_die(&v);
}

/* A message from peer p (rank 0: from rank r; others: from rank 0). */
static void wd_take(WdPeer *p, const WdMsg *m, double now) {
  if (m->kind == WD_DIED || m->kind == WD_STALLED) wd_die(m);
  if (m->kind == WD_BYE) {
    pthread_mutex_lock(&wd_send_lock); /* wd_send reads it on the main thread */
    p->bye = 1;
    pthread_mutex_unlock(&wd_send_lock);
    return;
  }
  if (m->kind != WD_BEAT) return;
  if (m->count != p->last.count || m->timed != p->last.timed) p->change_ms = now;
  p->last = *m, p->beat_ms = now;
}

/* Reads what p's stream holds; 1 when it closed (or failed). */
static int wd_read(WdPeer *p, double now) {
  for (;;) {
    ssize_t n = recv(p->fd, p->buf + p->have, sizeof p->buf - p->have, MSG_DONTWAIT);
    if (n == 0) return 1;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : 1;
    p->have += (size_t)n;
    if (p->have == sizeof p->buf) {
      WdMsg m;
      memcpy(&m, p->buf, sizeof m);
      p->have = 0;
      wd_take(p, &m, now);
    }
  }
}

/* This rank's beat to rank 0 (rank 0's: to every rank). */
static void wd_beat_all(void) {
  WdMsg me = wd_self(WD_BEAT);
  for (int r = 0; r < (wd.rank == 0 ? wd.size : 1); r++) wd_send(&wd.peers[r], &me);
}

/* The thread's beat, when a beat's interval passed. */
static void wd_beat(double now) {
  if (now - wd.sent_ms < WATCHDOG_BEAT_MS) return;
  wd.sent_ms = now;
  wd_beat_all();
}

/* Rank 0: the rank to blame once one is silent or stuck for the timeout, else -1: a
 * silent rank (a frozen process: missed beats) first, then one in a timed region outside
 * a collective (the others wait for it), then the one whose progress stopped first.
 * While a live rank is outside the timed regions (a checkpoint it writes, start-up), the
 * ranks waiting for it are not stuck: only silence counts then. */
static int wd_blame(double now) {
  int any = 0, best = -1, best_cls = 0, untimed = 0;
  double best_still = -1, t = wd.timeout_ms;
  for (int r = 0; r < wd.size; r++) /* a live rank outside the timed regions (writing a
                                       checkpoint): the others may wait for it */
    untimed |= !wd.peers[r].bye && (r == 0 || now - wd.peers[r].beat_ms <= t) && !wd.peers[r].last.timed;
  for (int r = 0; r < wd.size; r++) {
    const WdPeer *p = &wd.peers[r];
    if (p->bye) continue;
    double quiet = r ? now - p->beat_ms : 0, still = now - p->change_ms;
    any |= quiet > t || (!untimed && p->last.timed && still > t);
    int cls = quiet > 2.5 * WATCHDOG_BEAT_MS ? 3 : p->last.timed ? 2 - p->last.in_comm : 0;
    if (cls > best_cls || (cls > 0 && cls == best_cls && still > best_still))
      best = r, best_cls = cls, best_still = still;
  }
  return any ? best : -1;
}

static void wd_round_root(double now) {
  WdPeer *me = &wd.peers[0];
  WdMsg m = wd_self(WD_BEAT);
  if (m.count != me->last.count || m.timed != me->last.timed) me->change_ms = now;
  me->last = m;
  if (wd.timeout_ms > 0) {
    int r = wd_blame(now);
    if (r >= 0) wd_judge(WD_STALLED, r, wd.timeout_ms / 1e3);
  }
}

static void wd_round_peer(double now) {
  WdPeer *p = &wd.peers[0];
  if (!p->bye && wd.timeout_ms > 0 && now - p->beat_ms > wd.timeout_ms) {
    WdMsg v = {WD_STALLED, 0, wd_step_of(p), (uint64_t)(wd.timeout_ms / 1e3 + 0.5), 0, 0};
    wd_die(&v);
  }
}

void watchdog_step(int64_t step) {
  atomic_store_explicit(&watchdog_progress.step, step, memory_order_relaxed);
  atomic_fetch_add_explicit(&watchdog_progress.count, 1, memory_order_relaxed);
  if (wd.running && wd.rank != 0) wd_beat_all(); /* at once (rank 0's thread beats) */
}

static void *wd_main(void *arg) {
  (void)arg;
  int n = wd.rank == 0 ? wd.size : 1;
  struct pollfd *fds = calloc((size_t)n + 1, sizeof *fds);
  if (!fds) return NULL;
  for (;;) {
    int k = 0;
    fds[k++] = (struct pollfd){wd.wake[0], POLLIN, 0};
    for (int r = 0; r < n; r++) fds[k++] = (struct pollfd){wd.peers[r].fd, POLLIN, 0};
    if (poll(fds, (nfds_t)k, WD_POLL_MS) < 0 && errno != EINTR) break;
    if (fds[0].revents || atomic_load(&wd.quiet)) break;
    double now = wd_now();
    for (int r = 0; r < n; r++) {
      WdPeer *p = &wd.peers[r];
      if (p->fd < 0 || !(fds[r + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (wd_read(p, now) && !p->bye) { /* closed without a goodbye: it died */
        /* silent before (a stopped process the launcher then killed): it stalled */
        double quiet = now - p->beat_ms;
        int kind = wd.timeout_ms > 0 && quiet > 2.5 * WATCHDOG_BEAT_MS ? WD_STALLED : WD_DIED;
        WdMsg v = {kind, 0, wd_step_of(p), (uint64_t)(quiet / 1e3 + 0.5), 0, 0};
        if (wd.rank == 0) wd_judge(kind, r, quiet / 1e3);
        wd_die(&v);
      }
      if (p->bye) {
        pthread_mutex_lock(&wd_send_lock); /* the main thread sends too */
        close(p->fd), p->fd = -1;
        pthread_mutex_unlock(&wd_send_lock);
      }
    }
    wd_beat(now);
    if (wd.rank == 0) wd_round_root(now);
    else wd_round_peer(now);
  }
  free(fds);
  return NULL;
}

/* ---- start-up ---------------------------------------------------------------------- */

/* The IPv4 address the other ranks reach rank 0 at: COLOSSALC_WATCHDOG_HOST, else the
 * host name's first IPv4 address, else the loopback. */
static uint32_t wd_host_addr(void) {
  char name[256] = "";
  const char *host = getenv("COLOSSALC_WATCHDOG_HOST");
  if (!host && gethostname(name, sizeof name - 1) == 0) host = name;
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  uint32_t addr = htonl(INADDR_LOOPBACK);
  if (host && host[0] && getaddrinfo(host, NULL, &hints, &ai) == 0 && ai)
    addr = ((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr;
  if (ai) freeaddrinfo(ai);
  return ntohl(addr);
}

/* Rank 0: a listening socket on every interface; its address and port in where[0..1]. */
static int wd_listen(double where[2], char *err, size_t errlen) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t len = sizeof a;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1024) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
    file_set_error(err, errlen, "the watchdog: cannot listen on a TCP port: %s", strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  where[0] = (double)wd_host_addr(), where[1] = (double)ntohs(a.sin_port);
  return fd;
}

/* Rank 0: a connection from every other rank, each saying which it is. */
static int wd_accept(int lfd, char *err, size_t errlen) {
  double until = wd_now() + WD_CONNECT_MS;
  for (int got = 1; got < wd.size;) {
    struct pollfd p = {lfd, POLLIN, 0};
    int left = (int)(until - wd_now());
    if (left <= 0 || poll(&p, 1, left) <= 0)
      return file_set_error(err, errlen, "the watchdog: %d of %d ranks did not connect to rank 0 within %d s",
                            wd.size - got, wd.size - 1, WD_CONNECT_MS / 1000);
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    WdMsg m;
    if (fd < 0) continue;
    if (recv(fd, &m, sizeof m, MSG_WAITALL) != (ssize_t)sizeof m || m.kind != WD_HELLO || m.rank <= 0 ||
        m.rank >= wd.size || wd.peers[m.rank].fd >= 0) {
      close(fd);
      continue;
    }
    wd.peers[m.rank].fd = fd, got++;
  }
  return 0;
}

/* The others: a connection to rank 0 at where (retried while it starts listening). */
static int wd_connect(const double where[2], char *err, size_t errlen) {
  struct sockaddr_in a = {
      .sin_family = AF_INET, .sin_port = htons((uint16_t)where[1]), .sin_addr.s_addr = htonl((uint32_t)where[0])};
  double until = wd_now() + WD_CONNECT_MS;
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
      WdMsg hello = {WD_HELLO, wd.rank, 0, 0, 0, 0};
      if (send(fd, &hello, sizeof hello, MSG_NOSIGNAL) == (ssize_t)sizeof hello) {
        wd.peers[0].fd = fd;
        return 0;
      }
    }
    int e = errno;
    if (fd >= 0) close(fd);
    if (wd_now() > until) {
      char ip[INET_ADDRSTRLEN] = "?";
      inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
      return file_set_error(err, errlen,
                            "the watchdog: cannot connect to rank 0 at %s:%d: %s (set "
                            "COLOSSALC_WATCHDOG_HOST to an address of rank 0's host the others reach)",
                            ip, (int)where[1], strerror(e));
    }
    usleep(50000);
  }
}

static int wd_start_thread(char *err, size_t errlen) {
  double now = wd_now();
  for (int r = 0; r < (wd.rank == 0 ? wd.size : 1); r++) wd.peers[r].beat_ms = wd.peers[r].change_ms = now;
  if (pipe2(wd.wake, O_CLOEXEC | O_NONBLOCK) != 0 || pthread_create(&wd.thread, NULL, wd_main, NULL) != 0)
    return file_set_error(err, errlen, "the watchdog: cannot start its thread: %s", strerror(errno));
  wd.running = 1;
  return 0;
}

int watchdog_start(Comm *world, double timeout_s, char *err, size_t errlen) {
  if (world->size == 1) return 0;
  double where[3] = {0, 0, 0}; /* rank 0's address and port, whether it failed */
  int lfd = -1, failed = 0;
  wd.rank = world->rank, wd.size = world->size, wd.timeout_ms = timeout_s * 1e3;
  wd.peers = calloc((size_t)(wd.rank == 0 ? wd.size : 1), sizeof *wd.peers);
  for (int r = 0; wd.peers && r < (wd.rank == 0 ? wd.size : 1); r++) wd.peers[r].fd = -1;
  if (!wd.peers) failed = file_set_error(err, errlen, "out of memory") != 0;
  else if (wd.rank == 0 && (lfd = wd_listen(where, err, errlen)) < 0) failed = 1, where[2] = 1;
  world->host_all_reduce(world, where, 3, COMM_SUM);
  if (!failed && where[2] == 0)
    failed = (wd.rank == 0 ? wd_accept(lfd, err, errlen) : wd_connect(where, err, errlen)) != 0;
  if (lfd >= 0) close(lfd);
  if (!failed) failed = wd_start_thread(err, errlen) != 0;
  if (comm_agree(world, failed || where[2] != 0, err) != 0) {
    watchdog_stop();
    return -1;
  }
  return 0;
}

void watchdog_stop(void) {
  if (!wd.peers) return;
  if (wd.running) {
    (void)!write(wd.wake[1], "x", 1);
    pthread_join(wd.thread, NULL);
    wd.running = 0;
  }
  WdMsg bye = wd_self(WD_BYE);
  for (int r = 0; r < (wd.rank == 0 ? wd.size : 1); r++)
    if (wd.peers[r].fd >= 0) {
      wd_send(&wd.peers[r], &bye);
      close(wd.peers[r].fd);
    }
  for (int i = 0; i < 2; i++)
    if (wd.wake[i] >= 0) close(wd.wake[i]);
  free(wd.peers);
  wd = (Watchdog){.wake = {-1, -1}};
}

void watchdog_quit(void) {
  if (!wd.running || atomic_exchange(&wd.quiet, 1)) return;
  WdMsg bye = wd_self(WD_BYE);
  for (int r = 0; r < (wd.rank == 0 ? wd.size : 1); r++) wd_send(&wd.peers[r], &bye);
}

void watchdog_grace(double seconds) {
  if (!wd.running) return;
  double until = wd_now() + seconds * 1e3;
  while (wd_now() < until) usleep(20000); /* the thread ends the process on a verdict */
}
