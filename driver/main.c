/* colossalc: the command line. Reads a model, runs the pass pipeline, and prints
 * what was asked for. The pipeline is this one flat function (STYLE.md habit 3). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include "codegen/lower.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "passes/summary.h"

static void usage(FILE *f) {
  fputs("usage: colossalc FILE [options]\n"
        "\n"
        "Compiles a model (the colossalc model language, see docs/language.md) into a\n"
        "training program.\n"
        "\n"
        "options:\n"
        "  --set NAME=VALUE  override a config constant of the model (repeatable)\n"
        "  --gpus N          number of GPUs of the target cluster (default 1)\n"
        "  --summary         print parameters, FLOPs per step and a per-layer table\n"
        "                    (the default when nothing else is asked for)\n"
        "  --dump-ir         print the verified IR, one op per line with its shape\n"
        "  --dump-after=PASS print the IR after a pass: decompose or autodiff\n"
        "  --emit-kernels F  write the generated kernels (kernel form) and the program to F\n"
        "  -h, --help        print this help\n"
        "  --version         print the version\n", f);
}

typedef struct Options {
  const char *file;
  ConfigOverride *ov;
  int nov;
  long gpus;
  bool summary, dump_ir;
  const char *dump_after, *emit_kernels;
} Options;

static void add_override(Options *o, const char *arg) {
  const char *eq = strchr(arg, '=');
  if (!eq || eq == arg || !eq[1]) {
    fprintf(stderr, "colossalc: --set takes NAME=VALUE, got '%s'\n", arg);
    exit(1);
  }
  o->ov = realloc(o->ov, (o->nov + 1) * sizeof *o->ov);
  if (!o->ov) exit(1);
  o->ov[o->nov++] = (ConfigOverride){strndup(arg, eq - arg), eq + 1, false};
}

static long parse_positive(const char *flag, const char *arg) {
  char *end;
  long v = strtol(arg, &end, 10);
  if (*end || v <= 0 || v > (1L << 24)) {
    fprintf(stderr, "colossalc: %s takes a positive integer, got '%s'\n", flag, arg);
    exit(1);
  }
  return v;
}

static void parse_options(int argc, char **argv, Options *o) {
  enum { O_SET = 256, O_GPUS, O_SUMMARY, O_DUMP_IR, O_VERSION, O_DUMP_AFTER, O_EMIT_KERNELS };
  static const struct option longs[] = {
    {"set", required_argument, 0, O_SET}, {"gpus", required_argument, 0, O_GPUS},
    {"summary", no_argument, 0, O_SUMMARY}, {"dump-ir", no_argument, 0, O_DUMP_IR},
    {"dump-after", required_argument, 0, O_DUMP_AFTER}, {"emit-kernels", required_argument, 0, O_EMIT_KERNELS},
    {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, O_VERSION}, {0, 0, 0, 0}};
  *o = (Options){.gpus = 1};
  int c;
  while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    switch (c) {
    case O_SET: add_override(o, optarg); break;
    case O_GPUS: o->gpus = parse_positive("--gpus", optarg); break;
    case O_SUMMARY: o->summary = true; break;
    case O_DUMP_IR: o->dump_ir = true; break;
    case O_DUMP_AFTER: o->dump_after = optarg; break;
    case O_EMIT_KERNELS: o->emit_kernels = optarg; break;
    case 'h': usage(stdout); exit(0);
    case O_VERSION: printf("colossalc %s\n", COLOSSALC_VERSION); exit(0);
    default: usage(stderr); exit(1);
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, optind >= argc ? "colossalc: no model file given\n" : "colossalc: more than one model file given\n");
    usage(stderr);
    exit(1);
  }
  o->file = argv[optind];
  if (o->dump_after && strcmp(o->dump_after, "decompose") && strcmp(o->dump_after, "autodiff")) {
    fprintf(stderr, "colossalc: --dump-after takes decompose or autodiff, got '%s'\n", o->dump_after);
    exit(1);
  }
  if (!o->dump_ir && !o->dump_after && !o->emit_kernels) o->summary = true;
}

static void write_kernels(const char *path, const Program *p) {
  FILE *f = fopen(path, "w");
  if (!f) error_plain("cannot write %s", path);
  for (int i = 0; i < p->nkernels; i++) kernel_print(f, p->kernels[i]);
  char *json = program_to_json(p);
  fprintf(f, "program %s\n", json);
  free(json);
  if (fclose(f)) error_plain("cannot write %s", path);
}

/* The training pipeline after the front end: one flat list (STYLE.md habit 3). */
static void compile_training(Graph *g, const Options *o) {
  g = pass_decompose(g);                 /* requires: verified forward graph */
  ir_verify(g);
  if (o->dump_after && !strcmp(o->dump_after, "decompose")) ir_print(stdout, g);
  pass_autodiff(g);                      /* requires: loss, no composite ops */
  ir_verify(g);
  if (o->dump_after && !strcmp(o->dump_after, "autodiff")) ir_print(stdout, g);
  if (!o->emit_kernels) return;
  Program *p = lower_program(g);         /* requires: autodiff */
  write_kernels(o->emit_kernels, p);
}

int main(int argc, char **argv) {
  Options o;
  parse_options(argc, argv, &o);
  diag_stream = stderr;
  Arena *arena = arena_new();
  size_t len = 0;
  const char *text = NULL;
  DiagJump j;
  diag_push(&j);
  if (setjmp(j.jb)) return 1;
  text = frontend_read_file(arena, o.file, &len);
  diag_pop(&j);
  Graph *g = frontend_compile(arena, o.file, text, len, o.ov, o.nov);   /* parse, elaborate, verify */
  if (!g) return 1;
  if (o.dump_ir) ir_print(stdout, g);
  if (o.dump_after || o.emit_kernels) {
    diag_push(&j);
    if (setjmp(j.jb)) return 1;
    compile_training(g, &o);
    diag_pop(&j);
  }
  if (o.summary) {
    summary_print(stdout, g);
    if (o.gpus > 1) printf("cluster: %ld GPUs\n", o.gpus);
  }
  arena_free(arena);
  for (int i = 0; i < o.nov; i++) free((char *)o.ov[i].name);
  free(o.ov);
  return 0;
}
