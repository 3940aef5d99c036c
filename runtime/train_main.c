/* train_main: main() of the `train` executable. The compiler links the object that
 * defines colossalc_program, colossalc_cpu_builds and colossalc_nkernels
 * (program/program.h) with this library; main opens the communicator (comm.h: MPI under
 * mpirun, a single rank otherwise), parses the flags, opens the program (prog_open:
 * its version, layout, size and hash), picks the first build of the CPU kernels this
 * CPU runs (program/cpu.h: none is an error naming what the CPU lacks, never an
 * illegal instruction), and hands over to the trainer (train_loop.h), which runs this
 * rank's stage. --dump-program prints the program instead.
 *
 * Exit status: 0 on success, and after SIGTERM or SIGINT once a checkpoint is written
 * (train_loop.h); 128 + the signal's number after one when nothing could be saved (no
 * --ckpt-dir) or after a second one; 1 for any error, after one line "train: ..." on
 * stderr (bad flags, unreadable or invalid files, a failed write, a numerical stop, a
 * rank that died or stalled: watchdog.h) or "train: internal error: ..." when the
 * embedded program is damaged or of another version.
 * Under mpirun every rank exits with the same status, and the message is printed by
 * the rank it concerns (the lowest one when all ranks fail alike, as with a bad flag).
 */
#include "runtime/comm/comm.h"
#include "runtime/comm/watchdog.h"
#include "runtime/executor.h"
#ifdef COLOSSALC_HAVE_CUDA
#include "runtime/device/cuda.h"
#endif
#include "runtime/io/fileio.h"
#include "program/cpu.h"
#include "program/program.h"
#include "runtime/train_loop.h"
#include "runtime/train_opts.h"

#include <stdio.h>
#include <unistd.h>

static int train_fail(const char *prefix, const char *msg) {
  fflush(stdout);
  if (msg[0]) /* empty: another rank failed and says why */
    fprintf(stderr, "train: %s%s\n", prefix, msg);
  return 1;
}

/* --compile-kernels ARCH: the CUDA kernels into the kernel cache, on rank 0, with
 * NVRTC only (no GPU, no driver). */
static int train_compile_kernels(Comm *comm, const Prog *p, const TrainOpts *o, char *err, size_t errlen) {
#ifdef COLOSSALC_HAVE_CUDA
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  CudaOptions co = {.kernel_cache = o->kernel_cache,
                    .threads = o->threads > 0 ? (int)o->threads
                               : cpus > 0     ? (int)cpus
                                              : 1};
  int bad =
      comm->rank == 0 && device_cuda_precompile(p, colossalc_cuda_source, o->compile_kernels, &co, err, errlen) != 0;
  return comm_agree(comm, bad, err);
#else
  (void)comm, (void)p, (void)o;
  return file_set_error(err, errlen,
                        "--compile-kernels: this train was built without the CUDA device (no CUDA "
                        "toolkit where colossalc was built)");
#endif
}

/* The program this executable carries: its format checked, its kernels counted. */
static int train_open(Prog *p, char *err, size_t errlen) {
  if (prog_open(colossalc_program, colossalc_program_bytes, p, err, errlen) != 0) return -1;
  if (p->count[PROG_SEC_CODES] != colossalc_nkernels)
    return snprintf(err, errlen, "the program has %lld kernel codes and this executable %d",
                    (long long)p->count[PROG_SEC_CODES], colossalc_nkernels),
           -1;
  return 0;
}

/* The first build of the CPU kernels this CPU runs, or NULL with what each lacks. */
static const ProgCpuBuild *train_cpu_build(char *err, size_t errlen) {
  int n = snprintf(err, errlen, "this CPU cannot run the CPU kernels train was compiled with:");
  for (int i = 0; i < colossalc_ncpu_builds; i++) {
    char missing[512];
    if (cpu_runs(colossalc_cpu_builds[i].features, missing, sizeof missing)) return &colossalc_cpu_builds[i];
    if (n >= 0 && (size_t)n < errlen)
      n += snprintf(err + n, errlen - (size_t)n, "%s the build for %s needs %s", i ? ";" : "",
                    colossalc_cpu_builds[i].name, missing);
  }
  if (n >= 0 && (size_t)n < errlen)
    snprintf(err + n, errlen - (size_t)n,
             " (compile it for this CPU: colossalc --cpu x86-64-v2, or --cpu with the CPU's -march name)");
  return NULL;
}

static int train_main(Comm *comm, int argc, char **argv) {
  static char err[8192];
  TrainOpts opts;
  Prog prog;
  Trainer tr;
  int bad = train_opts_parse(argc, argv, &opts, err, sizeof err) != 0;
  if (comm_agree(comm, bad, err) != 0) return train_fail("", err);
  if (opts.help) {
    if (comm->rank == 0) train_opts_help(stdout);
    return 0;
  }
  if (opts.device_info) {
    if (comm->rank == 0) {
#ifdef COLOSSALC_HAVE_CUDA
      device_cuda_info(stdout);
#else
      printf("this train was built without the CUDA device (no CUDA toolkit where colossalc was built)\n");
#endif
    }
    return fflush(stdout) == 0 ? 0 : train_fail("", "--device-info: write failed");
  }
  bad = train_open(&prog, err, sizeof err) != 0;
  if (comm_agree(comm, bad, err) != 0) return train_fail("internal error: ", err);
  if (opts.dump_program) {
    if (comm->rank == 0) prog_print(stdout, &prog);
    return fflush(stdout) == 0 ? 0 : train_fail("", "--dump-program: write failed");
  }
  if (opts.compile_kernels) return train_compile_kernels(comm, &prog, &opts, err, sizeof err) ? train_fail("", err) : 0;
  const ProgCpuBuild *cpu = train_cpu_build(err, sizeof err);
  if (comm_agree(comm, !cpu, err) != 0) return train_fail("", err);
  trainer_catch_signals();
  if (watchdog_start(comm, opts.collective_timeout, err, sizeof err) != 0) return train_fail("", err);
  int rc = trainer_init(&tr, &prog, cpu, &opts, comm, err, sizeof err) || trainer_run(&tr, err, sizeof err) ||
           (!tr.halted && trainer_finish(&tr, err, sizeof err));
  int status = tr.halted ? tr.exit_status : 0;
  trainer_free(&tr);
  watchdog_stop(); /* the run ended on every rank alike: no death to report */
  return rc ? train_fail("", err) : status;
}

int main(int argc, char **argv) {
  static char err[1024];
  cpu_blas_pick(argv); /* before MPI: it may start this process again */
  Comm *comm = comm_open(&argc, &argv, err, sizeof err);
  if (!comm) return train_fail("", err);
  int rc = train_main(comm, argc, argv);
  comm->destroy(comm);
  return rc;
}
