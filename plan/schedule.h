/* Pipeline schedules: the order in which one stage runs the forward and backward
 * passes of its chunks over the step's micro-batches (codegen/pipeline.h describes
 * 1F1B, the interleaved schedule and ZB-H1). One definition for the planner, which
 * prices what a stage holds at once and draws the timeline, and for
 * codegen/pipeline.c, which writes the stages' programs from it. */
#ifndef COLOSSALC_PLAN_SCHEDULE_H
#define COLOSSALC_PLAN_SCHEDULE_H
#include <stdbool.h>

/* The schedules, by --schedule's names (schedule_names, plan/search.c). */
typedef enum { PS_1F1B, PS_INTERLEAVED, PS_ZBH1, PS_KINDS } PipeSchedule;

/* A pass of a chunk over a micro-batch: its forward; its backward (with ZB-H1 the
 * input-gradient pass B alone, which sends the gradient on); or, with ZB-H1, its
 * weight-gradient pass W (w), which neither receives nor sends. */
typedef struct PipeAction {
  bool fwd, w;
  int chunk, mb;
} PipeAction;

/* The actions of a stage: 2*m*v, or 3*m with ZB-H1. */
int pipe_actions(int v, int m, PipeSchedule kind);

/* Stage s's actions (pipe_actions of them) into out. Errors
 * (interleaved with m not a multiple of pp) through error_plain. */
int pipe_schedule(int pp, int v, int m, PipeSchedule kind, int s, PipeAction *out);

/* The micro-batches stage s holds at once under that schedule, each from its first
 * action on the stage to its last: the work-tier slots of the stage's program. */
int pipe_slots(int pp, int v, int m, PipeSchedule kind, int s);

#endif
