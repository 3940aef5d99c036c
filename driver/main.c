/* colossalc: the command line. Reads a model, runs the pass pipeline, and prints
 * what was asked for. The pipeline is this one flat function (STYLE.md habit 3). */
#include <errno.h>
#include <getopt.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "codegen/cuda.h"
#include "codegen/llvm.h"
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
        "  -o FILE           compile the training program into the executable FILE\n"
        "                    (run it with FILE --help)\n"
        "  --emit-llvm FILE  write the CPU kernels as LLVM IR (after optimisation)\n"
        "  --emit-cuda DIR   write the CUDA C source of every kernel to DIR/kernels.cu\n"
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
  const char *dump_after, *emit_kernels, *out, *emit_llvm, *emit_cuda;
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
  enum { O_SET = 256, O_GPUS, O_SUMMARY, O_DUMP_IR, O_VERSION, O_DUMP_AFTER, O_EMIT_KERNELS, O_EMIT_LLVM, O_EMIT_CUDA };
  static const struct option longs[] = {
    {"set", required_argument, 0, O_SET}, {"gpus", required_argument, 0, O_GPUS},
    {"summary", no_argument, 0, O_SUMMARY}, {"dump-ir", no_argument, 0, O_DUMP_IR},
    {"dump-after", required_argument, 0, O_DUMP_AFTER}, {"emit-kernels", required_argument, 0, O_EMIT_KERNELS},
    {"emit-llvm", required_argument, 0, O_EMIT_LLVM}, {"emit-cuda", required_argument, 0, O_EMIT_CUDA},
    {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, O_VERSION}, {0, 0, 0, 0}};
  *o = (Options){.gpus = 1};
  int c;
  while ((c = getopt_long(argc, argv, "ho:", longs, NULL)) != -1) {
    switch (c) {
    case O_SET: add_override(o, optarg); break;
    case O_GPUS: o->gpus = parse_positive("--gpus", optarg); break;
    case O_SUMMARY: o->summary = true; break;
    case O_DUMP_IR: o->dump_ir = true; break;
    case O_DUMP_AFTER: o->dump_after = optarg; break;
    case O_EMIT_KERNELS: o->emit_kernels = optarg; break;
    case O_EMIT_LLVM: o->emit_llvm = optarg; break;
    case O_EMIT_CUDA: o->emit_cuda = optarg; break;
    case 'o': o->out = optarg; break;
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
  if (!o->dump_ir && !o->dump_after && !o->emit_kernels && !o->out && !o->emit_llvm && !o->emit_cuda) o->summary = true;
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

static void write_cuda(const char *dir, const Program *p) {
  if (mkdir(dir, 0777) && errno != EEXIST) error_plain("cannot create %s: %s", dir, strerror(errno));
  char path[4096];
  snprintf(path, sizeof path, "%s/kernels.cu", dir);
  char *src = cuda_emit_source((const Kernel *const *)p->kernels, p->nkernels);
  FILE *f = fopen(path, "w");
  if (!f || fputs(src, f) < 0 || fclose(f)) error_plain("cannot write %s: %s", path, strerror(errno));
  free(src);
}

/* The linker command: the C compiler, the object, the runtime's link flags. */
static void link_train(const char *obj, const char *out, const char *libs) {
  FILE *f = fopen(COLOSSALC_LINK_FLAGS_FILE, "r");
  if (!f) error_plain("cannot read the runtime's link flags %s: %s", COLOSSALC_LINK_FLAGS_FILE, strerror(errno));
  char *argv[64], line[4096];
  int argc = 0;
  argv[argc++] = (char *)COLOSSALC_LINK_CC;
  argv[argc++] = (char *)obj;
  int first_flag = argc;
  while (argc < 56 && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (*line) argv[argc++] = strdup(line);
  }
  int last_flag = argc;
  fclose(f);
  char *libcopy = strdup(libs);
  for (char *t = strtok(libcopy, " "); t && argc < 60; t = strtok(NULL, " ")) argv[argc++] = t;
  argv[argc++] = "-o";
  argv[argc++] = (char *)out;
  argv[argc] = NULL;
  extern char **environ;
  pid_t pid;
  int status = 0;
  if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ) || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
      WEXITSTATUS(status))
    error_plain("linking %s failed (%s)", out, argv[0]);
  for (int i = first_flag; i < last_flag; i++) free(argv[i]);
  free(libcopy);
}

/* Kernels to machine code (LLVM), the program embedded beside them, linked into `train`. */
static void build_train(const Options *o, const Program *p) {
  char *json = program_to_json(p), err[512];
  LlvmModule *m = llvm_module_new(p->g->name);
  llvm_emit_program(m, (const Kernel *const *)p->kernels, p->nkernels, json);
  free(json);
  if (llvm_optimize(m, 3)) error_plain("LLVM optimisation failed");
  if (o->emit_llvm && llvm_write_ir(m, o->emit_llvm, err, sizeof err)) error_plain("%s", err);
  if (o->out) {
    char obj[4200];
    snprintf(obj, sizeof obj, "%s.o.tmp%d", o->out, (int)getpid());
    if (llvm_write_object(m, obj, err, sizeof err)) error_plain("%s", err);
    link_train(obj, o->out, llvm_link_libs(m));
    unlink(obj);
  }
  llvm_module_free(m);
}

/* The training pipeline after the front end: one flat list (STYLE.md habit 3). */
static Program *compile_training(Graph *g, const Options *o) {
  g = pass_decompose(g);                 /* requires: verified forward graph */
  ir_verify(g);
  if (o->dump_after && !strcmp(o->dump_after, "decompose")) ir_print(stdout, g);
  pass_autodiff(g);                      /* requires: loss, no composite ops */
  ir_verify(g);
  if (o->dump_after && !strcmp(o->dump_after, "autodiff")) ir_print(stdout, g);
  if (!o->emit_kernels && !o->out && !o->emit_llvm && !o->emit_cuda && !o->summary) return NULL;
  Program *p = lower_program(g);         /* requires: autodiff */
  if (o->emit_kernels) write_kernels(o->emit_kernels, p);
  if (o->emit_cuda) write_cuda(o->emit_cuda, p);
  if (o->out || o->emit_llvm) build_train(o, p);
  return p;
}

static void options_free(Options *o) {
  for (int i = 0; i < o->nov; i++) free((char *)o->ov[i].name);
  free(o->ov);
}

/* Exit status 1 after an error, with everything freed (so sanitizers see no leak). */
static int fail(Arena *arena, Options *o) {
  arena_free(arena);
  options_free(o);
  return 1;
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
  if (setjmp(j.jb)) return fail(arena, &o);
  text = frontend_read_file(arena, o.file, &len);
  diag_pop(&j);
  Graph *g = frontend_compile(arena, o.file, text, len, o.ov, o.nov);   /* parse, elaborate, verify */
  if (!g) return fail(arena, &o);
  if (o.dump_ir) ir_print(stdout, g);
  Program *volatile p = NULL;
  if (o.dump_after || o.emit_kernels || o.out || o.emit_llvm || o.emit_cuda) {
    diag_push(&j);
    if (setjmp(j.jb)) return fail(arena, &o);
    p = compile_training(g, &o);
    diag_pop(&j);
  } else if (o.summary) { /* the memory plan for the summary; a model that cannot be lowered still summarises */
    FILE *saved = diag_stream;
    diag_stream = NULL;
    diag_push(&j);
    if (!setjmp(j.jb)) p = compile_training(g, &o);
    diag_pop(&j);
    diag_stream = saved;
  }
  if (o.summary) {
    summary_print(stdout, g);
    if (p) summary_print_memory(stdout, p->tiers, p->work_peak);
    else printf("memory plan: not available (%s)\n", diag_last);
    if (o.gpus > 1) printf("cluster: %ld GPUs\n", o.gpus);
  }
  arena_free(arena);
  options_free(&o);
  return 0;
}
