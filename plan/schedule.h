/* Pipeline schedules: the order in which one stage runs the forward and backward
 * passes of its chunks over the step's micro-batches (codegen/pipeline.h describes
 * 1F1B and the interleaved schedule). One definition for the planner, which prices
 * what a stage holds at once, and for codegen/pipeline.c, which writes the stages'
 * programs from it. */
#ifndef COLOSSALC_PLAN_SCHEDULE_H
#define COLOSSALC_PLAN_SCHEDULE_H
#include <stdbool.h>

typedef struct PipeAction {
  bool fwd;
  int chunk, mb;
} PipeAction;

/* Stage s's actions (2*m*v of them) into out. Errors (interleaved with m not a
 * multiple of pp) through error_plain. */
int pipe_schedule(int pp, int v, int m, bool interleaved, int s, PipeAction *out);

/* The micro-batches stage s holds at once under that schedule, each from its first
 * action on the stage to its last: the work-tier slots of the stage's program. */
int pipe_slots(int pp, int v, int m, bool interleaved, int s);

#endif
