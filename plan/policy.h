/* policy: the decisions taken between the plan and code generation, each one function
 * with its contract, so that the driver (driver/main.c) asks and reports but does not
 * decide: the recompute a device budget (--device-memory) calls for, whether offload
 * plans the programs, and the budget it plans for. */
#ifndef COLOSSALC_PLAN_POLICY_H
#define COLOSSALC_PLAN_POLICY_H
#include <stdbool.h>
#include <stdint.h>
#include "passes/recompute.h"
#include "plan/search.h"

/* The work tier's budget (bytes: activations and workspace) of one program that must
 * fit device_memory with its state offloaded: what the chunks leave when the offload
 * plan takes the least room it can, four slots of the largest parameter's f32 bytes
 * (64-byte aligned, each with two 4 KiB granules: its chunk with its gradient and the
 * next in flight, codegen/offload.c) and a 4 KiB page. <= 0 when the chunks alone do
 * not fit (offload_chunks then reports the budget as too small). */
int64_t policy_device_work_budget(const Graph *g, int64_t device_memory);

/* The recompute that a device budget calls for, for a differentiated graph g (one
 * program, no --recompute): false when g's work peak as measure gives it (rounded up to
 * a 4 KiB page) fits policy_device_work_budget, or that budget is <= 0 (measure is then
 * not called); else true, with *c the layers recompute_choose picks under the budget
 * (an error when none fits). *budget: that budget, in both cases. */
bool policy_recompute_for_device(Graph *g, int64_t device_memory, RecomputeMeasure measure, void *ctx,
                                 RecomputeChoice *c, int64_t *budget);

/* The plan keeps the training state offloaded (OFFLOAD_STATE: chosen by the search or
 * forced by --offload state); false without a plan (r NULL). */
bool policy_offload_planned(const PlanResult *r);

/* Offload plans the programs: a device budget is given (device_memory > 0), or the plan
 * offloads the state. It may still find that everything fits (offload_chunks). */
bool policy_offload_wanted(const PlanResult *r, int64_t device_memory);

/* What offload plans for, per rank (bytes). */
typedef struct OffloadBudget {
  int64_t device;     /* all four tiers on the device */
  int64_t host;       /* what a node's host may hold of the state (0: unknown, unlimited) */
  int ranks_per_node; /* the ranks sharing that host (ZeRO-3): the plan's GPUs per node, 1 without a plan */
} OffloadBudget;

/* The budget offload plans for: device, device_memory if given, else the usable memory
 * of the plan's device (r->usable; 0 without a plan); host, host_memory if given, else
 * under a planned offload the node's host memory (cl, as the plan priced it), else 80%
 * of this machine's physical memory. cl: the plan's cluster, or the one of --gpu or
 * --cluster (one device) without a plan. */
OffloadBudget policy_offload_budget(const PlanResult *r, const Cluster *cl, int64_t device_memory, int64_t host_memory);

#endif
