/* Arenas: compile-time data is allocated by lifetime and freed all at once.
 * Every AST node, IR node and string of one compilation lives in one arena, so an
 * error anywhere can unwind (longjmp) without leaking. */
#ifndef COLOSSALC_ARENA_H
#define COLOSSALC_ARENA_H
#include <stddef.h>

typedef struct ArenaBlock ArenaBlock;
typedef struct Arena {
  ArenaBlock *head;
  size_t total;
} Arena;

Arena *arena_new(void);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t size);           /* zeroed, 16-byte aligned */
void *arena_array(Arena *a, size_t n, size_t size); /* overflow-checked */
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
