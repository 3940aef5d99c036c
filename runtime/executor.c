/* executor: instruction lists → Device calls (see the header). The dispatch switch
 * below is the only place that knows the instruction kinds of program.h.
 */
#include "executor.h"

#include "runtime/fileio.h"

#include <string.h>

int exec_init(Executor *ex, const RtProgram *prog, Device *dev, char *err, size_t errlen)
{
    static const char *const names[RT_TIERS] = {"params", "grads", "opt", "work"};
    memset(ex, 0, sizeof *ex);
    ex->prog = prog;
    ex->dev = dev;
    for (int t = 0; t < RT_TIERS; t++) {
        int64_t bytes = prog->tiers[t] > 0 ? prog->tiers[t] : 64;
        ex->tiers[t] = dev->alloc(dev, bytes);
        if (!ex->tiers[t]) {
            exec_free(ex);
            return file_set_error(err, errlen, "out of memory for the %s tier (%lld bytes)",
                                  names[t], (long long)bytes);
        }
    }
    return 0;
}

void exec_free(Executor *ex)
{
    for (int t = 0; t < RT_TIERS; t++)
        if (ex->tiers[t])
            ex->dev->free(ex->dev, ex->tiers[t]);
    memset(ex->tiers, 0, sizeof ex->tiers);
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
