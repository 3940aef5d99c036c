/* The CPU emitter: kernels in the kernel form (codegen/kernel.h) become machine code
 * for this machine through the LLVM C API (LLVM 14).
 *
 *   LlvmModule *m = llvm_module_new("gpt2");
 *   llvm_emit_program(m, kernels, n, prog, bytes); // the kernels and the four symbols
 *   llvm_optimize(m, 3);                          // O3, loop and SLP vectorizers, host CPU
 *   llvm_write_object(m, "train.o", err, sizeof err);
 *   llvm_module_free(m);
 *
 * A module targets the host CPU (LLVMGetHostCPUName/Features), or a build of the CPU
 * kernels (LlvmCpu: exactly the features it names, program/cpu.h, which `train` checks
 * before it calls them). Objects are position independent, so they link into a PIE
 * executable or a shared library. It may call glibc's vector math library
 * (libmvec) for exp, log, tanh, pow, sin and cos: link it with llvm_link_libs(m).
 * Each kernel is an external function with the runtime ABI of program/program.h:
 *     void NAME(char *const *bufs, int64_t lo, int64_t hi, const float *scalars)
 * (bufs[i]: the address of the kernel's buffer i, codegen/kernel.h)
 */
#ifndef COLOSSALC_LLVM_H
#define COLOSSALC_LLVM_H
#include <stddef.h>
#include <stdint.h>
#include "codegen/kernel.h"

typedef struct LlvmModule LlvmModule;

/* One build of the CPU kernels: its name for people ("portable (x86-64-v3)"), the
 * features it may use (program/cpu.h's names, comma-separated; NULL: the host's own CPU
 * and features), the CPU it is tuned for (NULL: the host's), and the suffix its kernels'
 * symbols carry ("" for one build). */
typedef struct LlvmCpu {
  const char *name, *features, *tune, *suffix;
} LlvmCpu;

LlvmModule *llvm_module_new(const char *name); /* for the host */
LlvmModule *llvm_module_new_for(const char *name, const LlvmCpu *cpu);
void llvm_module_free(LlvmModule *m);

/* Defines the function k->name; an internal error (naming the kernel) if LLVM's
 * verifier rejects it. */
void llvm_emit_kernel(LlvmModule *m, const Kernel *k);

/* Emits every kernel, then defines (as program/program.h declares them)
 *     const ProgCpuBuild colossalc_cpu_builds[1]; the module's build: the kernels, in order
 *     const int colossalc_ncpu_builds;           1
 *     const int colossalc_nkernels;              n
 *     const unsigned char colossalc_program[];   the program's bytes (64-byte aligned)
 *     const int64_t colossalc_program_bytes;     prog_bytes */
void llvm_emit_program(LlvmModule *m, const Kernel *const *kernels, int n, const void *prog, int64_t prog_bytes);

/* Runs LLVM's default<O{opt_level}> pipeline (0..3; vectorizers on) for the host CPU.
 * Returns 0, or -1 after printing LLVM's message to stderr. */
int llvm_optimize(LlvmModule *m, int opt_level);

/* Write the module as an object file / as LLVM IR text (--emit-llvm). Return 0, or -1
 * with LLVM's message in err. */
int llvm_write_object(LlvmModule *m, const char *path, char *err, size_t errlen);
int llvm_write_ir(LlvmModule *m, const char *path, char *err, size_t errlen);

/* The optimisation level a kernel gets in llvm_compile_program: 3 when it has loops
 * the vectorizers can use, else 2. */
int llvm_kernel_opt_level(const Kernel *k);

/* Reports kernels compiled so far of total (called with a lock held, from any thread). */
typedef void (*LlvmProgress)(int done, int total, void *ctx);

/* The whole program as object files for `train`, on `threads` threads: the kernels of
 * each of the ncpus builds (best first: the runtime calls the first its CPU runs) in
 * parts of a few kernels of one optimisation level (llvm_kernel_opt_level), each part
 * its own module and LLVM context, written to PREFIX.N.o; and the builds' kernel tables
 * with the program (the symbols of llvm_emit_program) and, when cuda is not NULL,
 *     const char colossalc_cuda_source[];        the CUDA C of the same kernels
 * in PREFIX.table.o. *objs (malloc'd, each path malloc'd, NULL-terminated) names every
 * object written or attempted; the caller links them (with the libraries llvm_link_libs
 * names, written to libs) and removes them. Returns 0, or -1 with the message in err. */
int llvm_compile_program(const Kernel *const *kernels, int n, const LlvmCpu *cpus, int ncpus, const void *prog,
                         int64_t prog_bytes, const char *cuda, int threads, const char *prefix, LlvmProgress progress,
                         void *ctx, char ***objs, char *libs, size_t libslen, char *err, size_t errlen);

/* The host's CPU name (LLVM's) and its features that program/cpu.h knows. */
void llvm_host(char *cpu, size_t cpulen, char *features, size_t featlen);

/* Libraries the object needs at link time, as linker flags: "-lmvec -lm" when the
 * kernels may call libmvec, else "-lm". */
const char *llvm_link_libs(const LlvmModule *m);

#endif
