/* comm: the single-rank backend, the choice of backend, and agreement on errors
 * (see the header). With one rank every reduction is the identity, so the self
 * backend copies when the call is out of place and does nothing in place.
 */
#include "comm.h"

#include "runtime/fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- self ---------------------------------------------------------------------- */

static void self_copy(const float *send, float *recv, int64_t count)
{
    if (send != recv && count > 0)
        memmove(recv, send, (size_t)count * sizeof *recv);
}

static void self_all_reduce(Comm *c, const float *send, float *recv, int64_t count, CommRed op)
{
    self_copy(send, recv, count);
}

static void self_reduce(Comm *c, const float *send, float *recv, int64_t count, CommRed op,
                        int root)
{
    self_copy(send, recv, count);
}

static void self_reduce_scatter(Comm *c, const float *send, float *recv, int64_t count,
                                CommRed op)
{
    self_copy(send, recv, count);
}

static void self_all_gather(Comm *c, const float *send, float *recv, int64_t count)
{
    self_copy(send, recv, count);
}

static void self_broadcast(Comm *c, float *buf, int64_t count, int root)
{
}

/* A rank cannot send to itself without a matching receive already posted; the
 * trainer never does, so either half alone is a bug. */
static void self_send(Comm *c, const float *buf, int64_t count, int peer)
{
    fprintf(stderr, "train: internal error: comm self: send to rank %d\n", peer);
    abort();
}

static void self_recv(Comm *c, float *buf, int64_t count, int peer)
{
    fprintf(stderr, "train: internal error: comm self: receive from rank %d\n", peer);
    abort();
}

static void self_barrier(Comm *c)
{
}

static void self_host_all_reduce(Comm *c, double *vals, int n, CommRed op)
{
}

static void self_abort(Comm *c, int code) __attribute__((noreturn));
static void self_abort(Comm *c, int code)
{
    fflush(stdout);
    exit(code);
}

static void self_destroy(Comm *c)
{
    free(c);
}

Comm *comm_self_new(void)
{
    Comm *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    *c = (Comm){.name = "self", .rank = 0, .size = 1, .local_size = 1,
                .all_reduce = self_all_reduce,
                .reduce = self_reduce, .reduce_scatter = self_reduce_scatter,
                .all_gather = self_all_gather, .broadcast = self_broadcast,
                .send = self_send, .recv = self_recv, .barrier = self_barrier,
                .host_all_reduce = self_host_all_reduce, .abort = self_abort,
                .destroy = self_destroy};
    return c;
}

/* ---- choice and agreement ------------------------------------------------------ */

static int launched_by_mpi(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                       "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return 1;
    return 0;
}

Comm *comm_open(int *argc, char ***argv, char *err, size_t errlen)
{
    const char *want = getenv("COLOSSALC_COMM");
    if (want && strcmp(want, "self") != 0 && strcmp(want, "mpi") != 0) {
        file_set_error(err, errlen, "COLOSSALC_COMM=%s: expected self or mpi", want);
        return NULL;
    }
    int mpi = want ? strcmp(want, "mpi") == 0 : launched_by_mpi();
    if (mpi)
        return comm_mpi_new(argc, argv, err, errlen);
    Comm *c = comm_self_new();
    if (!c)
        file_set_error(err, errlen, "out of memory");
    return c;
}

int comm_agree(Comm *c, int failed, int *first)
{
    /* [any failed, size - lowest failing rank]: both maxima. */
    double v[2] = {failed ? 1 : 0, failed ? c->size - c->rank : 0};
    c->host_all_reduce(c, v, 2, COMM_MAX);
    if (first)
        *first = v[0] > 0 ? c->size - (int)v[1] : -1;
    return v[0] > 0 ? -1 : 0;
}
