/* The CPU features a build of the CPU kernels needs, one table for the compiler and
 * the runtime: the compiler gives LLVM exactly the features of a build (LLVM's names,
 * "+avx2,+fma,..."), and `train` checks each of them on the CPU it starts on (CPUID,
 * and XGETBV for the register state the OS saves) before it calls a kernel of that
 * build. No feature outside the table reaches the code generator, so what is checked
 * is all a build can use.
 *
 *   char f[CPU_FEATURES_MAX];
 *   cpu_level_features("x86-64-v3", f, sizeof f);   // "cmov,cx8,...,fma,movbe,xsave"
 *   char missing[256];
 *   if (!cpu_runs(f, missing, sizeof missing)) ...  // missing: "avx2, fma"
 *
 * On other architectures than x86-64 the table is empty: one build, for the host. */
#ifndef COLOSSALC_CPU_H
#define COLOSSALC_CPU_H
#include <stdbool.h>
#include <stddef.h>

enum { CPU_FEATURES_MAX = 1024 };

/* true when the table knows this architecture's features (x86-64). */
bool cpu_table_known(void);

/* The features of an x86-64 micro-architecture level ("x86-64", "x86-64-v2", "-v3",
 * "-v4": the psABI's lists) as a comma-separated list of the table's names. 0, or -1
 * when name is not a level. */
int cpu_level_features(const char *name, char *out, size_t len);

/* The table's features among LLVM's feature string ("+avx2,-avx512f,...": those with
 * '+'), comma-separated, in the table's order. */
void cpu_from_llvm(const char *llvm_features, char *out, size_t len);

/* The table's feature whose C preprocessor macro (as `cc -march=NAME -dM -E` defines
 * it) is macro, or NULL. */
const char *cpu_feature_of_macro(const char *macro);

/* features as LLVM's feature string: "+a,+b". */
void cpu_to_llvm(const char *features, char *out, size_t len);

/* true when this CPU (and its OS) runs every feature of the list; otherwise false
 * with the missing ones in missing ("avx512f, avx512bw"). An empty list runs. */
bool cpu_runs(const char *features, char *missing, size_t len);

/* This CPU's features: the table's that cpu_runs would accept. */
void cpu_host_features(char *out, size_t len);

#endif
