/* The program's structs as data: each struct's fields (name, type, offset, elements),
 * from the field tables of program/isa.h and program/program.h. The layout hash
 * (prog_layout) and the printer (prog_print) walk them; nothing else needs them. */
#ifndef COLOSSALC_PROGRAM_FIELDS_H
#define COLOSSALC_PROGRAM_FIELDS_H
#include <stddef.h>
#include "program/program.h"

typedef struct ProgField {
  const char *name;
  IsaType type;
  size_t offset; /* in its struct (a payload's: in the payload) */
  int count;     /* elements */
} ProgField;

typedef struct ProgStruct {
  const char *name;
  size_t size;
  const ProgField *fields;
  int nfields;
} ProgStruct;

/* The stage, parameter, input, code, kernel, argument, list and chunk structs, the
 * instructions' common fields, then each payload (in ISA_PAYLOADS order, from
 * PROG_PAYLOAD0). */
enum {
  PROG_STAGE_STRUCT,
  PROG_PARAM_STRUCT,
  PROG_INPUT_STRUCT,
  PROG_CODE_STRUCT,
  PROG_KERNEL_STRUCT,
  PROG_ARG_STRUCT,
  PROG_LIST_STRUCT,
  PROG_CHUNK_STRUCT,
  PROG_INSTR_STRUCT,
  PROG_PAYLOAD0,
  PROG_NSTRUCTS = PROG_PAYLOAD0 + ISA_PL_none
};
extern const ProgStruct prog_structs[PROG_NSTRUCTS];
/* Each field type's bytes, how it prints, its names (ISA_PRINT_NAME). */
extern const size_t prog_type_size[ISA_NTYPES];
extern const IsaPrint prog_type_print[ISA_NTYPES];
extern const char *const *const prog_type_names[ISA_NTYPES];

#endif
