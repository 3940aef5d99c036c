/* The program's field tables as data (program/fields.h), and the printer for people
 * (prog_print): every record of every section, each field by name. */
#include "program/fields.h"

#include <inttypes.h>
#include <string.h>

#define TYPE_SIZE(type, ctype, print, names) sizeof(ctype),
const size_t prog_type_size[ISA_NTYPES] = {ISA_TYPES(TYPE_SIZE)};
#undef TYPE_SIZE
#define TYPE_PRINT(type, ctype, print, names) print,
const IsaPrint prog_type_print[ISA_NTYPES] = {ISA_TYPES(TYPE_PRINT)};
#undef TYPE_PRINT
#define TYPE_NAMES(type, ctype, print, names) names,
const char *const *const prog_type_names[ISA_NTYPES] = {ISA_TYPES(TYPE_NAMES)};
#undef TYPE_NAMES

#define FIELD(S, type, name, dims, count) {#name, ISA_T_##type, offsetof(S, name), count},
static const ProgField stage_fields[] = {PROG_STAGE_FIELDS(FIELD, ProgStage)};
static const ProgField param_fields[] = {PROG_PARAM_FIELDS(FIELD, ProgParam)};
static const ProgField input_fields[] = {PROG_INPUT_FIELDS(FIELD, ProgInput)};
static const ProgField code_fields[] = {PROG_CODE_FIELDS(FIELD, ProgCode)};
static const ProgField kernel_fields[] = {PROG_KERNEL_FIELDS(FIELD, ProgKernel)};
static const ProgField arg_fields[] = {PROG_ARG_FIELDS(FIELD, ProgArg)};
static const ProgField list_fields[] = {PROG_LIST_FIELDS(FIELD, ProgList)};
static const ProgField chunk_fields[] = {PROG_CHUNK_FIELDS(FIELD, ProgChunk)};
static const ProgField instr_fields[] = {ISA_COMMON_FIELDS(FIELD, IsaInstr)};
#define PAYLOAD_FIELDS(member, type, fields) static const ProgField isa_##member##_fields[] = {fields(FIELD, type)};
ISA_PAYLOADS(PAYLOAD_FIELDS)
#undef PAYLOAD_FIELDS
#undef FIELD

#define STRUCT(type, fields) {#type, sizeof(type), fields, (int)(sizeof fields / sizeof *fields)},
const ProgStruct prog_structs[PROG_NSTRUCTS] = {
    STRUCT(ProgStage, stage_fields) STRUCT(ProgParam, param_fields) STRUCT(ProgInput, input_fields)
        STRUCT(ProgCode, code_fields) STRUCT(ProgKernel, kernel_fields) STRUCT(ProgArg, arg_fields)
            STRUCT(ProgList, list_fields) STRUCT(ProgChunk, chunk_fields) STRUCT(IsaInstr, instr_fields)
#define PAYLOAD_STRUCT(member, type, fields) STRUCT(type, isa_##member##_fields)
                ISA_PAYLOADS(PAYLOAD_STRUCT)
#undef PAYLOAD_STRUCT
};
#undef STRUCT

/* ---- printing ------------------------------------------------------------------------------ */

static int64_t field_int(IsaType t, const char *at) {
  switch (prog_type_size[t]) {
  case 1: return *(const int8_t *)at;
  case 2: return *(const int16_t *)at;
  case 4: return *(const int32_t *)at;
  default: return *(const int64_t *)at;
  }
}

static void print_value(FILE *f, const Prog *p, IsaType t, const char *at) {
  int64_t v = prog_type_print[t] == ISA_PRINT_REAL ? 0 : field_int(t, at);
  switch (prog_type_print[t]) {
  case ISA_PRINT_INT: fprintf(f, "%" PRId64, v); break;
  case ISA_PRINT_REAL:
    fprintf(f, "%.9g", prog_type_size[t] == 4 ? (double)*(const float *)at : *(const double *)at);
    break;
  case ISA_PRINT_STR: fprintf(f, v < 0 ? "-" : "\"%s\"", prog_str(p, v)); break;
  case ISA_PRINT_NAME: {
    int n = 0;
    while (prog_type_names[t][n]) n++;
    if (v >= 0 && v < n) fputs(prog_type_names[t][v], f);
    else fprintf(f, "%" PRId64, v);
    break;
  }
  }
}

/* One field: name=value, or name=[v, ...] for an array. */
static void print_field(FILE *f, const Prog *p, const ProgField *x, const char *rec) {
  size_t size = prog_type_size[x->type];
  fprintf(f, " %s=%s", x->name, x->count > 1 ? "[" : "");
  for (int i = 0; i < x->count; i++) {
    if (i) fputs(", ", f);
    print_value(f, p, x->type, rec + x->offset + i * size);
  }
  if (x->count > 1) fputc(']', f);
}

/* Every field of a record, then a newline unless it is an element of a line (inline). */
static void print_record(FILE *f, const Prog *p, int which, const void *rec, int inline_) {
  const ProgStruct *st = &prog_structs[which];
  for (int i = 0; i < st->nfields; i++) print_field(f, p, &st->fields[i], rec);
  fputs(inline_ ? ";" : "\n", f);
}

/* The common fields that differ from a blank instruction's, then the payload's. */
static void print_instr(FILE *f, const Prog *p, const IsaInstr *in) {
  const ProgStruct *st = &prog_structs[PROG_INSTR_STRUCT];
  IsaInstr blank = isa_instr((IsaOp)in->op);
  fputs(in->op < ISA_NOPS ? isa_op_names[in->op] : "?", f);
  for (int i = 1; i < st->nfields; i++) {
    const ProgField *x = &st->fields[i];
    if (memcmp((const char *)in + x->offset, (const char *)&blank + x->offset, prog_type_size[x->type]))
      print_field(f, p, x, (const char *)in);
  }
  IsaPayload pl = in->op < ISA_NOPS ? isa_op_payload[in->op] : ISA_PL_none;
  const ProgStruct *ps = &prog_structs[PROG_PAYLOAD0 + pl];
  for (int i = 0; pl != ISA_PL_none && i < ps->nfields; i++)
    print_field(f, p, &ps->fields[i], (const char *)&in->kernel);
  fputc('\n', f);
}

static void print_lists(FILE *f, const Prog *p) {
  for (int64_t l = 0; l < p->count[PROG_SEC_LISTS]; l++) {
    const ProgList *x = &p->lists[l];
    fprintf(f, "list %" PRId64 ":", l);
    print_record(f, p, PROG_LIST_STRUCT, x, 0);
    for (int64_t i = 0; i < x->n; i++) {
      fprintf(f, "  %" PRId64 " ", i);
      print_instr(f, p, &p->instrs[x->first + i]);
    }
  }
}

/* INTS[at, at + n) as name=[...]. */
static void print_ints(FILE *f, const Prog *p, const char *name, int64_t at, int64_t n) {
  if (n <= 0) return;
  fprintf(f, " %s=[", name);
  for (int64_t i = 0; i < n; i++) fprintf(f, "%s%" PRId64, i ? ", " : "", p->ints[at + i]);
  fputc(']', f);
}

static void print_stage(FILE *f, const Prog *all, int s) {
  Prog p = prog_stage(all, s);
  const ProgStage *st = p.s;
  if (s < 0) fprintf(f, "model:");
  else fprintf(f, "stage %d:", s);
  print_record(f, &p, PROG_STAGE_STRUCT, st, 0);
  for (int64_t i = 0; i < st->nparams; i++)
    fprintf(f, "  param %" PRId64 ":", i), print_record(f, &p, PROG_PARAM_STRUCT, &p.params[i], 0);
  for (int64_t i = 0; i < st->ninputs; i++)
    fprintf(f, "  input %" PRId64 ":", i), print_record(f, &p, PROG_INPUT_STRUCT, &p.inputs[i], 0);
  for (int64_t i = 0; i < st->nchunks; i++)
    fprintf(f, "  chunk %" PRId64 ":", i), print_record(f, &p, PROG_CHUNK_STRUCT, &p.chunks[i], 0);
  int64_t groups = 0; /* each group: its count, then its stages */
  for (int64_t g = 0; g < st->ngroups; g++) groups += 1 + p.ints[st->groups + groups];
  fprintf(f, "  ints:");
  print_ints(f, &p, "memory", st->memory, st->nmemory);
  print_ints(f, &p, "predicted", st->predicted, st->npredicted ? 1 + 3 * st->npredicted : 0);
  print_ints(f, &p, "peers", st->peers, st->npeers);
  print_ints(f, &p, "groups", st->groups, groups);
  print_ints(f, &p, "fp8_runs", st->fp8_runs, 3 * st->fp8_nruns);
  fputc('\n', f);
}

void prog_print(FILE *f, const Prog *p) {
  const ProgHeader *h = p->h;
  fprintf(f, "program \"%s\": format version %u, layout %08x, %" PRId64 " bytes, hash %016" PRIx64 ", %d stage%s\n",
          prog_str(p, p->stages[0].model), h->version, h->layout, h->bytes, h->hash, p->nstages - 1,
          p->nstages == 2 ? "" : "s");
  for (int s = -1; s < p->nstages - 1; s++) print_stage(f, p, s);
  for (int64_t i = 0; i < p->count[PROG_SEC_CODES]; i++)
    fprintf(f, "code %" PRId64 ":", i), print_record(f, p, PROG_CODE_STRUCT, &p->codes[i], 0);
  for (int64_t i = 0; i < p->count[PROG_SEC_KERNELS]; i++) {
    const ProgKernel *k = &p->kernels[i];
    fprintf(f, "kernel %" PRId64 ": code %" PRId64 " (%s), args", i, k->code, prog_str(p, p->codes[k->code].name));
    for (int64_t a = k->arg0; a < k->arg0 + k->nargs; a++) print_record(f, p, PROG_ARG_STRUCT, &p->args[a], 1);
    fputc('\n', f);
  }
  print_lists(f, p);
}
