/* `--dump-plan`: the chosen plan as text (a table for people), JSON (a stable
 * schema for programs, documented in docs/plan.md, and read back by
 * `--plan FILE`), or SVG (the pipeline timeline of one step and memory per
 * device). */
#ifndef COLOSSALC_PLAN_DUMP_H
#define COLOSSALC_PLAN_DUMP_H
#include <stdio.h>
#include "plan/search.h"

void plan_dump_text(FILE *f, const PlanResult *r);
/* The chosen plan in two lines: mesh, ZeRO, micro-batches, recompute; the precision
 * and attention it is priced with, the predicted step time and memory per device. */
void plan_dump_brief(FILE *f, const PlanResult *r);
/* The JSON form, malloc'd (free it). Deterministic: no times of the search itself. */
char *plan_to_json(const PlanResult *r);
void plan_dump_svg(FILE *f, const PlanResult *r);

/* Read a plan file (the --dump-plan=json schema, any subset of its choices) into
 * forced parts; per-op strategies go in an arena array. User errors name the file
 * and the field. */
void plan_read_json(Arena *a, const char *path, const Graph *g, PlanForce *f);

#endif
