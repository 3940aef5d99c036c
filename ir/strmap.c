/* String hash map: FNV-1a hashing, linear probing, doubling at 50 % load. */
#include "ir/strmap.h"
#include <stdint.h>
#include <string.h>

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

void strmap_init(StrMap *m, Arena *a) { *m = (StrMap){a, NULL, 0, 0}; }

static StrMapEntry *find(const StrMap *m, const char *key) {
  if (!m->cap) return NULL;
  for (uint64_t i = hash_str(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1))
    if (!m->e[i].key || !strcmp(m->e[i].key, key)) return &m->e[i];
}

void *strmap_get(const StrMap *m, const char *key) {
  StrMapEntry *e = find(m, key);
  return e && e->key ? e->val : NULL;
}

static void grow(StrMap *m) {
  StrMap big = {m->arena, NULL, m->cap ? m->cap * 2 : 64, 0};
  big.e = arena_array(m->arena, big.cap, sizeof *big.e);
  for (int i = 0; i < m->cap; i++)
    if (m->e[i].key) strmap_put(&big, m->e[i].key, m->e[i].val);
  *m = big;
}

void strmap_put(StrMap *m, const char *key, void *val) {
  if (2 * (m->n + 1) > m->cap) grow(m);
  StrMapEntry *e = find(m, key);
  if (!e->key) m->n++;
  e->key = key;
  e->val = val;
}
