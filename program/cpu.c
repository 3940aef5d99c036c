/* The CPU feature table (program/cpu.h): LLVM's name, the C preprocessor's macro, and
 * where CPUID reports it. */
#include "program/cpu.h"
#include <stdio.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

enum { EAX, EBX, ECX, EDX };
enum { ST_NONE, ST_YMM, ST_ZMM }; /* the register state the OS must save (XCR0) */

typedef struct Feature {
  const char *name, *macro;
  unsigned leaf, sub;
  int reg, bit, state, level; /* level: the x86-64 psABI level that first has it (1-4), 0: none */
} Feature;

#if defined(__x86_64__)
static const Feature table[] = {
    {"cmov", "", 1, 0, EDX, 15, ST_NONE, 1},
    {"cx8", "", 1, 0, EDX, 8, ST_NONE, 1},
    {"fxsr", "__FXSR__", 1, 0, EDX, 24, ST_NONE, 1},
    {"mmx", "__MMX__", 1, 0, EDX, 23, ST_NONE, 1},
    {"sse", "__SSE__", 1, 0, EDX, 25, ST_NONE, 1},
    {"sse2", "__SSE2__", 1, 0, EDX, 26, ST_NONE, 1},
    {"cx16", "__GCC_HAVE_SYNC_COMPARE_AND_SWAP_16", 1, 0, ECX, 13, ST_NONE, 2},
    {"sahf", "__LAHF_SAHF__", 0x80000001, 0, ECX, 0, ST_NONE, 2},
    {"popcnt", "__POPCNT__", 1, 0, ECX, 23, ST_NONE, 2},
    {"sse3", "__SSE3__", 1, 0, ECX, 0, ST_NONE, 2},
    {"ssse3", "__SSSE3__", 1, 0, ECX, 9, ST_NONE, 2},
    {"sse4.1", "__SSE4_1__", 1, 0, ECX, 19, ST_NONE, 2},
    {"sse4.2", "__SSE4_2__", 1, 0, ECX, 20, ST_NONE, 2},
    {"avx", "__AVX__", 1, 0, ECX, 28, ST_YMM, 3},
    {"avx2", "__AVX2__", 7, 0, EBX, 5, ST_YMM, 3},
    {"bmi", "__BMI__", 7, 0, EBX, 3, ST_NONE, 3},
    {"bmi2", "__BMI2__", 7, 0, EBX, 8, ST_NONE, 3},
    {"f16c", "__F16C__", 1, 0, ECX, 29, ST_YMM, 3},
    {"fma", "__FMA__", 1, 0, ECX, 12, ST_YMM, 3},
    {"lzcnt", "__LZCNT__", 0x80000001, 0, ECX, 5, ST_NONE, 3},
    {"movbe", "__MOVBE__", 1, 0, ECX, 22, ST_NONE, 3},
    {"xsave", "__XSAVE__", 1, 0, ECX, 26, ST_NONE, 3},
    {"avx512f", "__AVX512F__", 7, 0, EBX, 16, ST_ZMM, 4},
    {"avx512bw", "__AVX512BW__", 7, 0, EBX, 30, ST_ZMM, 4},
    {"avx512cd", "__AVX512CD__", 7, 0, EBX, 28, ST_ZMM, 4},
    {"avx512dq", "__AVX512DQ__", 7, 0, EBX, 17, ST_ZMM, 4},
    {"avx512vl", "__AVX512VL__", 7, 0, EBX, 31, ST_ZMM, 4},
    {"avx512ifma", "__AVX512IFMA__", 7, 0, EBX, 21, ST_ZMM, 0},
    {"avx512vbmi", "__AVX512VBMI__", 7, 0, ECX, 1, ST_ZMM, 0},
    {"avx512vbmi2", "__AVX512VBMI2__", 7, 0, ECX, 6, ST_ZMM, 0},
    {"avx512vnni", "__AVX512VNNI__", 7, 0, ECX, 11, ST_ZMM, 0},
    {"avx512bitalg", "__AVX512BITALG__", 7, 0, ECX, 12, ST_ZMM, 0},
    {"avx512vpopcntdq", "__AVX512VPOPCNTDQ__", 7, 0, ECX, 14, ST_ZMM, 0},
    {"avx512bf16", "__AVX512BF16__", 7, 1, EAX, 5, ST_ZMM, 0},
    {"avx512fp16", "__AVX512FP16__", 7, 0, EDX, 23, ST_ZMM, 0},
    {"avxvnni", "__AVXVNNI__", 7, 1, EAX, 4, ST_YMM, 0},
    {"gfni", "__GFNI__", 7, 0, ECX, 8, ST_NONE, 0},
    {"vaes", "__VAES__", 7, 0, ECX, 9, ST_YMM, 0},
    {"vpclmulqdq", "__VPCLMULQDQ__", 7, 0, ECX, 10, ST_YMM, 0},
    {"pclmul", "__PCLMUL__", 1, 0, ECX, 1, ST_NONE, 0},
    {"aes", "__AES__", 1, 0, ECX, 25, ST_NONE, 0},
    {"adx", "__ADX__", 7, 0, EBX, 19, ST_NONE, 0},
    {"prfchw", "__PRFCHW__", 0x80000001, 0, ECX, 8, ST_NONE, 0},
};
enum { NFEAT = sizeof table / sizeof table[0] };
#else
static const Feature table[1];
enum { NFEAT = 0 };
#endif

bool cpu_table_known(void) { return NFEAT > 0; }

static void append(char *out, size_t len, const char *sep, const char *s) {
  size_t n = strlen(out);
  if (n < len) snprintf(out + n, len - n, "%s%s", n ? sep : "", s);
}

/* true when the comma-separated list holds name. */
static bool listed(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ',');
    size_t k = e ? (size_t)(e - p) : strlen(p);
    if (k == n && !strncmp(p, name, n)) return true;
    if (!e) break;
    p = e + 1;
  }
  return false;
}

int cpu_level_features(const char *name, char *out, size_t len) {
  int level = !strcmp(name, "x86-64")      ? 1
              : !strcmp(name, "x86-64-v2") ? 2
              : !strcmp(name, "x86-64-v3") ? 3
              : !strcmp(name, "x86-64-v4") ? 4
                                           : 0;
  if (!level || !NFEAT) return -1;
  out[0] = 0;
  for (int i = 0; i < NFEAT; i++)
    if (table[i].level && table[i].level <= level) append(out, len, ",", table[i].name);
  return 0;
}

void cpu_from_llvm(const char *llvm_features, char *out, size_t len) {
  out[0] = 0;
  for (int i = 0; i < NFEAT; i++) {
    char plus[64];
    snprintf(plus, sizeof plus, "+%s", table[i].name);
    if (listed(llvm_features, plus)) append(out, len, ",", table[i].name);
  }
}

const char *cpu_feature_of_macro(const char *macro) {
  for (int i = 0; i < NFEAT; i++)
    if (table[i].macro[0] && !strcmp(table[i].macro, macro)) return table[i].name;
  return NULL;
}

void cpu_to_llvm(const char *features, char *out, size_t len) {
  out[0] = 0;
  for (const char *p = features; *p;) {
    const char *e = strchr(p, ',');
    int k = e ? (int)(e - p) : (int)strlen(p);
    char one[64];
    snprintf(one, sizeof one, "+%.*s", k, p);
    append(out, len, ",", one);
    if (!e) break;
    p = e + 1;
  }
}

#if defined(__x86_64__)
static unsigned reg_of(unsigned leaf, unsigned sub, int reg) {
  unsigned r[4] = {0};
  if (__get_cpuid_max(leaf & 0x80000000u, NULL) < leaf) return 0;
  __cpuid_count(leaf, sub, r[EAX], r[EBX], r[ECX], r[EDX]);
  return r[reg];
}

/* The register state the OS saves on a context switch (XCR0), 0 without OSXSAVE. */
static unsigned long long xcr0(void) {
  if (!(reg_of(1, 0, ECX) & (1u << 27))) return 0;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (unsigned long long)hi << 32 | lo;
}

static bool has(const Feature *f, unsigned long long x) {
  if (!(reg_of(f->leaf, f->sub, f->reg) & (1u << f->bit))) return false;
  if (f->state == ST_YMM) return (x & 0x6) == 0x6;
  if (f->state == ST_ZMM) return (x & 0xe6) == 0xe6;
  return true;
}
#endif

bool cpu_runs(const char *features, char *missing, size_t len) {
  if (missing && len) missing[0] = 0;
  bool ok = true;
#if defined(__x86_64__)
  unsigned long long x = xcr0();
  for (int i = 0; i < NFEAT; i++)
    if (listed(features, table[i].name) && !has(&table[i], x)) {
      ok = false;
      if (missing) append(missing, len, ", ", table[i].name);
    }
#else
  (void)features;
#endif
  return ok;
}

void cpu_host_features(char *out, size_t len) {
  out[0] = 0;
#if defined(__x86_64__)
  unsigned long long x = xcr0();
  for (int i = 0; i < NFEAT; i++)
    if (has(&table[i], x)) append(out, len, ",", table[i].name);
#endif
}
