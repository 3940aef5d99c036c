/* The IR's text form (`--dump-ir`): one op per line with its inputs, attributes,
 * dtype and shape, layer and source location. ir/irparse.c reads the same form back,
 * so golden tests can round-trip it. */
#include "ir/ir.h"
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Shortest text that reads back as the same double. */
void ir_format_float(char *buf, size_t len, double v);
void ir_format_float(char *buf, size_t len, double v) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, len, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) return;
  }
}

static const char *init_names[] = {"none", "zeros", "ones", "normal", "uniform", "constant"};

static void print_init(FILE *f, Init in) {
  char a[32], b[32];
  ir_format_float(a, sizeof a, in.a);
  ir_format_float(b, sizeof b, in.b);
  switch (in.kind) {
  case INIT_NORMAL: fprintf(f, " init=normal(%s, %s)", a, b); break;
  case INIT_UNIFORM: fprintf(f, " init=uniform(%s, %s)", a, b); break;
  case INIT_CONSTANT: fprintf(f, " init=constant(%s)", a); break;
  case INIT_ZEROS:
  case INIT_ONES: fprintf(f, " init=%s", init_names[in.kind]); break;
  case INIT_NONE: break;
  }
}

static bool attr_is_default(const AttrSpec *s, const AttrVal *v) {
  if (s->required || s->optional) return false;
  return s->kind == AK_FLOAT ? v->f == s->def : v->i == (int64_t)s->def;
}

static void print_attr(FILE *f, const AttrSpec *s, const AttrVal *v) {
  char buf[32];
  fprintf(f, " %s=", s->name);
  switch (s->kind) {
  case AK_INT:
  case AK_BOOL: fprintf(f, "%" PRId64, v->i); break;
  case AK_FLOAT:
    ir_format_float(buf, sizeof buf, v->f);
    fputs(buf, f);
    break;
  case AK_DTYPE: fputs(dtype_name((DType)v->i), f); break;
  case AK_STR: fprintf(f, "\"%s\"", v->s); break;
  case AK_INTS:
    fputc('[', f);
    for (int i = 0; i < v->n; i++) fprintf(f, "%s%" PRId64, i ? "," : "", v->v[i]);
    fputc(']', f);
    break;
  }
}

static void print_node(FILE *f, const Node *n) {
  char shape[192]; /* 8 dimensions of up to 15 digits */
  fprintf(f, "%%%d = %s", n->id, op_info(n->op)->name);
  if (n->name) fprintf(f, " %s", n->name);
  for (int i = 0; i < n->nin; i++) fprintf(f, "%s %%%d", i ? "," : "", n->in[i]->id);
  for (int i = 0; i < op_nattrs(n->op); i++) {
    const AttrSpec *s = op_attr(n->op, i);
    if (n->attr[i].set && !attr_is_default(s, &n->attr[i])) print_attr(f, s, &n->attr[i]);
  }
  if (n->op == OP_PARAM) print_init(f, n->init);
  shape_format(shape, sizeof shape, &n->shape);
  fprintf(f, " : %s%s", dtype_name(n->dtype), shape);
  if (n->layer >= 0) fprintf(f, " layer=%d", n->layer);
  if (n->loc.line > 0) fprintf(f, " @%d:%d", n->loc.line, n->loc.col);
  fputc('\n', f);
}

static void print_train(FILE *f, const TrainSpec *t, int loss_id) {
  char v[8][32];
  double vals[8] = {t->lr, t->beta1, t->beta2, t->eps, t->weight_decay, t->momentum, t->clip, t->min_lr};
  for (int i = 0; i < 8; i++) ir_format_float(v[i], sizeof v[i], vals[i]);
  fprintf(f,
          "train %%%d %s lr=%s beta1=%s beta2=%s eps=%s weight_decay=%s momentum=%s clip=%s min_lr=%s "
          "warmup=%" PRId64 " schedule=%s\n",
          loss_id, opt_names[t->opt], v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], t->warmup,
          t->schedule == SCHED_COSINE ? "cosine" : "constant");
}

void ir_print(FILE *f, const Graph *g) {
  fprintf(f, "graph %s", g->name);
  if (g->source) fprintf(f, " source=%s", g->source);
  fputc('\n', f);
  for (int i = 0; i < g->nlayers; i++) fprintf(f, "layer %d %s group=%d\n", i, g->layers[i].name, g->layers[i].group);
  for (int i = 0; i < g->n; i++) print_node(f, g->nodes[i]);
  if (g->has_train) print_train(f, &g->train, g->loss ? g->loss->id : -1);
}
