/* Prototypes of the per-op functions named by ir/ops.def (defined in ir/shape.c). */
#ifndef COLOSSALC_OPFUNCS_H
#define COLOSSALC_OPFUNCS_H
#include "ir/ir.h"

#define OP(id, name, nin, cls, flags, attrs) \
  void infer_##name(Node *n);                \
  void cost_##name(const Node *n, Cost *c);
#include "ir/ops.def"
#undef OP

#endif
