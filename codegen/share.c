/* Kernel sharing (codegen/lower.h, program_share_kernels): the kernels of a program
 * that compute the same thing on different buffers become one code.
 *
 * Two kernels share code when their kernel form is equal with the buffers' bindings
 * (tier, byte offset, name) taken out: the same iteration space, phases, expression
 * DAGs (compared by structure, so the ids the builders handed out do not matter),
 * views relative to each buffer, and buffer element counts and dtypes. The bindings
 * become arguments: a kernel instruction passes the address of each buffer
 * (program/program.h, "args"). One more thing of the bindings reaches the code: which
 * buffers overlap (the LLVM emitter's alias scopes, kernel_alias_classes), so the
 * overlap classes are part of the key.
 *
 * Lowering has narrowed each buffer's binding to the elements the kernel touches
 * (kernel_narrow), so offsets within a buffer are part of the binding too. The key is
 * a canonical serialisation of the kernel (int64 words), hashed; equal
 * hashes are confirmed word by word. The 96 layers of GPT-3 lower to the same few
 * dozen codes. */
#include <stdlib.h>
#include <string.h>
#include "codegen/lower.h"

typedef struct Key {
  int64_t *w;
  int n, cap;
  int *canon;
  int next;
} Key;

static void put(Key *k, int64_t v) {
  if (k->n == k->cap) {
    k->cap = k->cap ? 2 * k->cap : 256;
    k->w = realloc(k->w, (size_t)k->cap * sizeof *k->w);
    ir_assert(k->w);
  }
  k->w[k->n++] = v;
}

static int64_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static int64_t key_expr(Key *k, const Kernel *kn, const KExpr *e);

static void key_view(Key *k, const Kernel *kn, const KView *v) {
  put(k, v->offset);
  for (int d = 0; d < kn->ndims; d++) put(k, v->strides[d]);
  put(k, v->gather ? key_expr(k, kn, v->gather) : -1);
  put(k, v->gather ? v->gather_stride : 0);
}

/* Writes e's operands, then e as one record; returns e's canonical number. */
static int64_t key_expr(Key *k, const Kernel *kn, const KExpr *e) {
  if (k->canon[e->id] >= 0) return k->canon[e->id];
  int64_t a = e->a ? key_expr(k, kn, e->a) : -1, b = e->b ? key_expr(k, kn, e->b) : -1;
  int64_t c = e->c ? key_expr(k, kn, e->c) : -1;
  bool view = e->kind == KX_LOAD || e->kind == KX_RAND;
  if (view && e->view.gather) key_expr(k, kn, e->view.gather);
  put(k, -1000 - e->kind); /* a record marker no other word of a record can be */
  switch (e->kind) {
  case KX_CONST: put(k, float_bits(e->f)); break;
  case KX_LOAD: put(k, e->buf); break;
  case KX_ACC: put(k, e->acc); break;
  case KX_COORD: put(k, e->axis); break;
  case KX_SCALAR: put(k, e->index); break;
  case KX_UNARY: put(k, e->uop); break;
  case KX_BINARY: put(k, e->bop); break;
  case KX_SELECT: break;
  case KX_RAND: put(k, e->seed), put(k, e->index); break;
  }
  put(k, a), put(k, b), put(k, c);
  if (view) key_view(k, kn, &e->view);
  return k->canon[e->id] = k->next++;
}

static void key_kernel(Key *k, const Kernel *kn) {
  k->n = 0, k->next = 0;
  k->canon = realloc(k->canon, ((size_t)kn->nexprs + 1) * sizeof *k->canon);
  ir_assert(k->canon);
  memset(k->canon, -1, ((size_t)kn->nexprs + 1) * sizeof *k->canon);
  put(k, kn->par), put(k, kn->rows), put(k, kn->cols), put(k, kn->ndims), put(k, kn->row_dims);
  for (int d = 0; d < kn->ndims; d++) put(k, kn->dims[d]);
  int cls[K_MAX_BUFS];
  kernel_alias_classes(kn, cls);
  put(k, kn->nbufs);
  for (int i = 0; i < kn->nbufs; i++) put(k, kn->bufs[i].numel), put(k, kn->bufs[i].dtype), put(k, cls[i]);
  if (kn->attn) {
    const KAttn *A = kn->attn;
    const KOperand *ops[KA_OPERANDS];
    kattn_operands(A, ops);
    put(k, -3000 - A->pass);
    put(k, A->batch), put(k, A->heads), put(k, A->sq), put(k, A->sk), put(k, A->hd);
    put(k, A->causal), put(k, float_bits(A->scale)), put(k, A->store);
    for (int i = 0; i < KA_OPERANDS; i++)
      put(k, ops[i]->buf), put(k, ops[i]->offset), put(k, ops[i]->sb), put(k, ops[i]->ss);
  }
  put(k, kn->naccs), put(k, kn->nphases);
  for (int i = 0; i < kn->nphases; i++) {
    const KPhase *p = &kn->phases[i];
    put(k, -2000 - i);
    put(k, p->kind), put(k, p->reduce), put(k, p->acc), put(k, p->buf), put(k, p->store);
    if (p->kind != KPH_REDUCE) key_view(k, kn, &p->view);
    put(k, key_expr(k, kn, p->expr));
  }
}

static uint64_t key_hash(const Key *k) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a over the words */
  for (int i = 0; i < k->n; i++) {
    h ^= (uint64_t)k->w[i];
    h *= 1099511628211ull;
    h ^= h >> 29;
  }
  return h;
}

/* ---- the codes ------------------------------------------------------------------------ */

typedef struct Slot {
  uint64_t hash;
  int64_t *w;
  int n;
  int code;
} Slot;

/* The code's name: k<code>_ and what the first instance's name says after its own
 * "k<index>_" (or "s<stage>_k<index>_"). */
static const char *code_name(Arena *a, int code, const char *inst) {
  const char *s = inst;
  if (s[0] == 's') s = strchr(s, '_') ? strchr(s, '_') + 1 : s;
  if (s[0] == 'k' && strchr(s, '_')) s = strchr(s, '_') + 1;
  return arena_printf(a, "k%d_%s", code, s);
}

void program_share_kernels(Program *p) {
  if (p->code) return;
  Arena *a = p->arena;
  int n = p->nkernels, cap = 16;
  while (cap < 2 * n) cap *= 2;
  Slot *tab = calloc((size_t)cap, sizeof *tab);
  ir_assert(tab);
  p->code_of = arena_array(a, n ? n : 1, sizeof(int));
  p->code = arena_array(a, n ? n : 1, sizeof(Kernel *));
  p->ncode = 0;
  Key k = {0};
  for (int i = 0; i < n; i++) {
    key_kernel(&k, p->kernels[i]);
    uint64_t h = key_hash(&k);
    size_t at = (size_t)(h & (uint64_t)(cap - 1));
    while (tab[at].w && !(tab[at].hash == h && tab[at].n == k.n && !memcmp(tab[at].w, k.w, (size_t)k.n * 8)))
      at = (at + 1) & (size_t)(cap - 1);
    if (!tab[at].w) {
      tab[at] = (Slot){h, arena_array(a, (size_t)k.n, 8), k.n, p->ncode};
      memcpy(tab[at].w, k.w, (size_t)k.n * 8);
      Kernel *c = arena_alloc(a, sizeof *c);
      *c = *p->kernels[i];
      c->name = code_name(a, p->ncode, p->kernels[i]->name);
      p->code[p->ncode++] = c;
    }
    p->code_of[i] = tab[at].code;
  }
  free(k.w);
  free(k.canon);
  free(tab);
}
