/* The program format (program/program.h): the names of its enumerations, the layout
 * hash of its structs, and reading a blob, which checks it and points into it. */
#include "program/program.h"
#include "program/fields.h"

#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#define NAME(name, text) text,
const char *const isa_dtype_names[] = {ISA_DTYPES(NAME) 0};
const char *const isa_tier_names[] = {ISA_TIERS(NAME) "shared", 0};
const char *const isa_comm_names[] = {ISA_COMM_KINDS(NAME) 0};
const char *const isa_group_names[] = {ISA_GROUPS(NAME) 0};
const char *const isa_red_names[] = {ISA_REDUCTIONS(NAME) 0};
const char *const isa_loc_names[] = {ISA_LOCS(NAME) 0};
const char *const isa_part_names[] = {"params", "grads", "opt", 0};
const char *const prog_role_names[] = {PROG_ROLES(NAME) 0};
const char *const prog_init_names[] = {PROG_INITS(NAME) 0};
const char *const prog_opt_names[] = {PROG_OPTIMIZERS(NAME) 0};
const char *const prog_sched_names[] = {PROG_SCHEDULES(NAME) 0};
const char *const prog_archkind_names[] = {PROG_ARCHKINDS(NAME) 0};
const char *const prog_list_names[] = {PROG_LISTS(NAME) 0};
#undef NAME
#define OP_NAME(name, text, payload) text,
const char *const isa_op_names[] = {ISA_OPS(OP_NAME) 0};
#undef OP_NAME
#define OP_PAYLOAD(name, text, payload) ISA_PL_##payload,
const IsaPayload isa_op_payload[ISA_NOPS] = {ISA_OPS(OP_PAYLOAD)};
#undef OP_PAYLOAD

/* ---- the layout hash ---------------------------------------------------------------------- */

/* FNV-1a over 64-bit words (a last partial word padded with zeros). */
static uint64_t fnv_words(uint64_t h, const void *data, size_t n) {
  const unsigned char *b = data;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = 0;
    memcpy(&w, b + i, n - i < 8 ? n - i : 8);
    h = (h ^ w) * 1099511628211ull;
  }
  return h;
}

static uint64_t fnv_str(uint64_t h, const char *s) { return fnv_words(h, s, strlen(s) + 1); }

static uint64_t layout_struct(uint64_t h, const ProgStruct *st) {
  uint64_t v[4] = {st->size, (uint64_t)st->nfields, 0, 0};
  h = fnv_words(fnv_str(h, st->name), v, sizeof v);
  for (int i = 0; i < st->nfields; i++) {
    const ProgField *f = &st->fields[i];
    uint64_t w[4] = {(uint64_t)f->type, f->offset, (uint64_t)f->count, prog_type_size[f->type]};
    h = fnv_words(fnv_str(h, f->name), w, sizeof w);
  }
  return h;
}

uint32_t prog_layout(void) {
  uint64_t h = 1469598103934665603ull, v[2] = {sizeof(ProgHeader), PROG_NSECTIONS};
  h = fnv_words(h, v, sizeof v);
  for (int i = 0; i < PROG_NSTRUCTS; i++) h = layout_struct(h, &prog_structs[i]);
  for (int i = 0; i < ISA_NOPS; i++) h = fnv_str(h, isa_op_names[i]);
  return (uint32_t)(h ^ h >> 32);
}

/* ---- reading ------------------------------------------------------------------------------ */

static const size_t section_size[PROG_NSECTIONS] = {
#define SIZE(name, type) sizeof(type),
    PROG_SECTIONS(SIZE)
#undef SIZE
};
static const char *const section_names[PROG_NSECTIONS] = {
#define SNAME(name, type) #name,
    PROG_SECTIONS(SNAME)
#undef SNAME
};

static int refuse(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
uint64_t prog_hash(const void *blob, int64_t bytes) {
  ProgHeader h;
  memcpy(&h, blob, sizeof h);
  h.hash = 0;
  uint64_t x = fnv_words(1469598103934665603ull, &h, sizeof h);
  return fnv_words(x, (const char *)blob + sizeof h, (size_t)(bytes - (int64_t)sizeof h));
}

static int refuse(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

static int check_header(const ProgHeader *h, int64_t bytes, char *err, size_t errlen) {
  const char *again = "compile the model again with the colossalc that built this runtime";
  if (bytes < (int64_t)sizeof *h || memcmp(h->magic, "colossal", 8))
    return refuse(err, errlen, "the program is not a colossalc program (%" PRId64 " bytes, no header)", bytes);
  if (h->version != PROG_VERSION)
    return refuse(err, errlen, "the program is of format version %u and this runtime reads version %d: %s", h->version,
                  PROG_VERSION, again);
  if (h->layout != prog_layout())
    return refuse(err, errlen, "the program's structs (layout %08x) are not this runtime's (layout %08x): %s",
                  h->layout, prog_layout(), again);
  if (h->bytes != bytes)
    return refuse(err, errlen, "the program is %" PRId64 " bytes and its header says %" PRId64 ": it is damaged", bytes,
                  h->bytes);
  uint64_t hash = prog_hash(h, bytes);
  if (hash != h->hash)
    return refuse(err, errlen, "the program is damaged: its bytes hash to %016" PRIx64 ", its header says %016" PRIx64,
                  hash, h->hash);
  return 0;
}

static int check_sections(const ProgHeader *h, char *err, size_t errlen) {
  for (int s = 0; s < PROG_NSECTIONS; s++) {
    const ProgSection *x = &h->sec[s];
    int64_t room = h->bytes - x->offset;
    if (x->offset < (int64_t)sizeof *h || x->offset % 8 || x->count < 0 || x->offset > h->bytes ||
        x->count > room / (int64_t)section_size[s])
      return refuse(err, errlen,
                    "the program's section %s (%" PRId64 " records at byte %" PRId64 ") lies outside its %" PRId64
                    " bytes",
                    section_names[s], x->count, x->offset, h->bytes);
  }
  const ProgSection *str = &h->sec[PROG_SEC_STRINGS];
  if (h->sec[PROG_SEC_STAGES].count < 1 || str->count < 1 || ((const char *)h)[str->offset + str->count - 1])
    return refuse(err, errlen, "the program has no stage, or its strings are not terminated");
  return 0;
}

int prog_open(const void *blob, int64_t bytes, Prog *p, char *err, size_t errlen) {
  const ProgHeader *h = blob;
  memset(p, 0, sizeof *p);
  if (!blob || check_header(h, bytes, err, errlen) || check_sections(h, err, errlen)) return -1;
  const char *base = blob;
  const void *at[PROG_NSECTIONS];
  for (int s = 0; s < PROG_NSECTIONS; s++) at[s] = base + h->sec[s].offset, p->count[s] = h->sec[s].count;
  p->h = h;
  p->stages = at[PROG_SEC_STAGES], p->nstages = (int)h->sec[PROG_SEC_STAGES].count;
  p->codes = at[PROG_SEC_CODES], p->kernels = at[PROG_SEC_KERNELS], p->args = at[PROG_SEC_ARGS];
  p->instrs = at[PROG_SEC_INSTRS], p->lists = at[PROG_SEC_LISTS], p->ints = at[PROG_SEC_INTS];
  p->strings = at[PROG_SEC_STRINGS];
  p->params = at[PROG_SEC_PARAMS], p->inputs = at[PROG_SEC_INPUTS], p->chunks = at[PROG_SEC_CHUNKS];
  *p = prog_stage(p, -1);
  return 0;
}

Prog prog_stage(const Prog *p, int s) {
  Prog v = *p;
  const char *base = (const char *)p->h;
  v.s = &p->stages[s + 1];
  v.params = (const ProgParam *)(base + p->h->sec[PROG_SEC_PARAMS].offset) + v.s->param0;
  v.inputs = (const ProgInput *)(base + p->h->sec[PROG_SEC_INPUTS].offset) + v.s->input0;
  v.chunks = (const ProgChunk *)(base + p->h->sec[PROG_SEC_CHUNKS].offset) + v.s->chunk0;
  return v;
}

const char *prog_str(const Prog *p, int64_t off) { return off < 0 ? "" : p->strings + off; }

const ProgList *prog_list(const Prog *p, ProgListKind k) { return p->s->list[k] < 0 ? NULL : &p->lists[p->s->list[k]]; }

const ProgParam *prog_find_param(const Prog *p, const char *name) {
  for (int i = 0; i < p->s->nparams; i++)
    if (!strcmp(prog_str(p, p->params[i].name), name)) return &p->params[i];
  return NULL;
}

int prog_part_ranges(const Prog *p, const ProgChunk *c, int part, int64_t off[2]) {
  if (part != PART_OPT) return off[0] = c->start, 1;
  if (p->s->tiers[TIER_OPT] == 0) return 0;
  off[0] = c->start, off[1] = p->s->opt_v_offset + c->start;
  return prog_moments(p->s);
}
