/* policy: how much the activations get beside offload's chunks, when offload plans the
 * programs and for what budget (plan/policy.h has the contracts). */
#include "plan/policy.h"
#include <unistd.h>

enum { POLICY_PAGE = 4096 }; /* the offload plan's granule (codegen/offload.c) */

static int64_t largest_param_bytes(const Graph *g) {
  int64_t largest = 0;
  for (int k = 0; k < g->nparams; k++) {
    int64_t b = (shape_numel(&g->params[k]->shape) * 4 + 63) / 64 * 64;
    if (b > largest) largest = b;
  }
  return largest;
}

int64_t policy_device_work_budget(const Graph *g, int64_t device_memory) {
  return device_memory - 4 * (largest_param_bytes(g) + 2 * POLICY_PAGE) - POLICY_PAGE;
}

bool policy_recompute_for_device(Graph *g, int64_t device_memory, RecomputeMeasure measure, void *ctx,
                                 RecomputeChoice *c, int64_t *budget) {
  *budget = policy_device_work_budget(g, device_memory);
  if (*budget <= 0 || (measure(g, ctx) + POLICY_PAGE - 1) / POLICY_PAGE * POLICY_PAGE <= *budget) return false;
  recompute_choose(g, *budget, measure, ctx, c);
  return true;
}

bool policy_offload_planned(const PlanResult *r) { return r && r->best.ch.offload == OFFLOAD_STATE; }

bool policy_offload_wanted(const PlanResult *r, int64_t device_memory) {
  return device_memory > 0 || policy_offload_planned(r);
}

/* 80% of this machine's physical memory, or 0 when it cannot be read. */
static int64_t machine_host_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
  return pages > 0 && psize > 0 ? (int64_t)pages * psize / 10 * 8 : 0;
}

OffloadBudget policy_offload_budget(const PlanResult *r, const Cluster *cl, int64_t device_memory,
                                    int64_t host_memory) {
  OffloadBudget b = {.device = device_memory ? device_memory
                               : r           ? (int64_t)r->usable
                                             : 0,
                     .ranks_per_node = r ? cl->gpus_per_node : 1};
  if (host_memory) b.host = host_memory;
  else if (policy_offload_planned(r)) b.host = (int64_t)cl->host_memory; /* the node's, as the plan priced it */
  else b.host = machine_host_memory();
  return b;
}
