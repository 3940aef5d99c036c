/* A string-keyed hash map (open addressing) allocated in an arena: symbol tables of
 * the front end and name checks of the verifier. Keys are not copied. */
#ifndef COLOSSALC_STRMAP_H
#define COLOSSALC_STRMAP_H
#include "ir/arena.h"

typedef struct StrMapEntry {
  const char *key;
  void *val;
} StrMapEntry;
typedef struct StrMap {
  Arena *arena;
  StrMapEntry *e;
  int cap, n;
} StrMap;

void strmap_init(StrMap *m, Arena *a);
void *strmap_get(const StrMap *m, const char *key);
void strmap_put(StrMap *m, const char *key, void *val); /* replaces */

#endif
