/* executor: instruction lists → Device calls (see the header). The dispatch switch
 * below is the only place that knows the instruction kinds of program.h. Reserved
 * tiers keep one commit count per granule; a granule has memory behind it while
 * its count is above zero.
 */
#include "executor.h"

#include "runtime/fileio.h"

#include <stdlib.h>
#include <string.h>

static const char *const tier_names[RT_TIERS] = {"params", "grads", "opt", "work"};

/* Tier t's bytes rounded up to the device's granule. */
static int64_t reserved_bytes(const Executor *ex, int t)
{
    int64_t g = ex->dev->granule;
    return (ex->prog->tiers[t] + g - 1) / g * g;
}

static int exec_reserve_tier(Executor *ex, int t)
{
    int64_t bytes = reserved_bytes(ex, t);
    ex->commits[t] = calloc((size_t)(bytes / ex->dev->granule), sizeof *ex->commits[t]);
    ex->tiers[t] = ex->commits[t] ? ex->dev->reserve(ex->dev, bytes) : NULL;
    return ex->tiers[t] ? 0 : -1;
}

int exec_init_reserved(Executor *ex, const RtProgram *prog, Device *dev, unsigned reserve_mask,
                       char *err, size_t errlen)
{
    memset(ex, 0, sizeof *ex);
    ex->prog = prog;
    ex->dev = dev;
    int can_reserve = dev->reserve && dev->granule > 0;
    for (int t = 0; t < RT_TIERS; t++) {
        int64_t bytes = prog->tiers[t] > 0 ? prog->tiers[t] : 64;
        int reserve = can_reserve && (reserve_mask >> t & 1) && prog->tiers[t] > 0;
        if (reserve ? exec_reserve_tier(ex, t) != 0
                    : (ex->tiers[t] = dev->alloc(dev, bytes)) == NULL) {
            exec_free(ex);
            return file_set_error(err, errlen, "out of memory for the %s tier (%lld bytes)",
                                  tier_names[t], (long long)bytes);
        }
        ex->committed[t] = reserve ? 0 : prog->tiers[t];
    }
    return 0;
}

int exec_init(Executor *ex, const RtProgram *prog, Device *dev, char *err, size_t errlen)
{
    return exec_init_reserved(ex, prog, dev, 0, err, errlen);
}

void exec_free(Executor *ex)
{
    for (int t = 0; t < RT_TIERS; t++) {
        if (ex->commits[t] && ex->tiers[t])
            ex->dev->unreserve(ex->dev, ex->tiers[t], reserved_bytes(ex, t));
        else if (ex->tiers[t])
            ex->dev->free(ex->dev, ex->tiers[t]);
        free(ex->commits[t]);
    }
    memset(ex->tiers, 0, sizeof ex->tiers);
    memset(ex->commits, 0, sizeof ex->commits);
}

int exec_reserved(const Executor *ex, int tier)
{
    return ex->commits[tier] != NULL;
}

/* Granules [*g0, *g1) that [offset, offset+bytes) touches. */
static void granule_span(const Executor *ex, int64_t offset, int64_t bytes, int64_t *g0,
                         int64_t *g1)
{
    int64_t g = ex->dev->granule;
    *g0 = offset / g;
    *g1 = bytes > 0 ? (offset + bytes + g - 1) / g : *g0;
}

/* Decommits the granules of [g0, g1) whose count is zero, in maximal runs. */
static void decommit_idle(Executor *ex, int tier, int64_t g0, int64_t g1)
{
    int64_t g = ex->dev->granule;
    for (int64_t i = g0, j; i < g1; i = j) {
        for (j = i; j < g1 && ex->commits[tier][j] == 0; j++)
            ;
        if (j > i) {
            ex->dev->decommit(ex->dev, ex->tiers[tier], i * g, (j - i) * g);
            ex->committed[tier] -= (j - i) * g;
        }
        j += j == i;
    }
}

int exec_commit(Executor *ex, int tier, int64_t offset, int64_t bytes, char *err,
                size_t errlen)
{
    int64_t g0, g1, g = ex->dev->granule;
    if (!ex->commits[tier])
        return 0;
    granule_span(ex, offset, bytes, &g0, &g1);
    uint32_t *n = ex->commits[tier];
    for (int64_t i = g0, j; i < g1; i = j) { /* runs with nothing behind them yet */
        for (j = i; j < g1 && n[j] == 0; j++)
            ;
        if (j > i && ex->dev->commit(ex->dev, ex->tiers[tier], i * g, (j - i) * g) != 0) {
            decommit_idle(ex, tier, g0, i); /* undo this call's earlier runs */
            return file_set_error(err, errlen, "out of memory committing %lld bytes of the %s "
                                  "tier", (long long)((j - i) * g), tier_names[tier]);
        }
        ex->committed[tier] += (j - i) * g;
        j += j == i;
    }
    for (int64_t i = g0; i < g1; i++)
        n[i]++;
    return 0;
}

void exec_decommit(Executor *ex, int tier, int64_t offset, int64_t bytes)
{
    int64_t g0, g1;
    if (!ex->commits[tier])
        return;
    granule_span(ex, offset, bytes, &g0, &g1);
    for (int64_t i = g0; i < g1; i++)
        ex->commits[tier][i]--;
    decommit_idle(ex, tier, g0, g1);
}

static void exec_instr(Executor *ex, const RtInstr *in, const float *scalars)
{
    Device *dev = ex->dev;
    switch (in->op) {
    case RT_OP_KERNEL:
        dev->kernel(dev, in->kernel, in->extent, ex->tiers, scalars);
        break;
    case RT_OP_ZERO:
        dev->zero(dev, ex->tiers[in->tier], in->offset, in->bytes);
        break;
    case RT_OP_GEMM:
        dev->gemm(dev, &in->gemm, ex->tiers);
        break;
    }
}

void exec_run(Executor *ex, const RtList *list, const float *scalars)
{
    for (int i = 0; i < list->n; i++)
        exec_instr(ex, &list->instr[i], scalars);
}

void exec_zero_tier(Executor *ex, int tier)
{
    if (ex->prog->tiers[tier] > 0)
        ex->dev->zero(ex->dev, ex->tiers[tier], 0, ex->prog->tiers[tier]);
}

void exec_write(Executor *ex, int tier, int64_t offset, const void *src, int64_t bytes)
{
    ex->dev->upload(ex->dev, ex->tiers[tier], offset, src, bytes);
}

void exec_read(Executor *ex, int tier, int64_t offset, void *dst, int64_t bytes)
{
    ex->dev->download(ex->dev, ex->tiers[tier], offset, dst, bytes);
}

char *exec_host_tier(Executor *ex, int tier)
{
    return ex->dev->host_view ? ex->dev->host_view(ex->dev, ex->tiers[tier]) : NULL;
}
