/* layout.h — where this stepc's own files are: the runtime archives and headers `stepc build` links
 * an artifact from, and the shipped recipes. Nothing is compiled in, so that an installed stepc runs
 * with its source and build trees gone (docs/install.md). The rule, for the executable at EXE:
 *
 *   1. EXE's folder holds STEPC_LAYOUT_FILE (a build tree writes one beside its stepc; it is never
 *      installed): its lines `key path` name each file; a relative path is taken from that folder.
 *   2. Otherwise the install layout around EXE = PREFIX/bin/stepc:
 *        PREFIX/lib/stepc/libstepc_rt.a, libstepc_ir.a
 *        PREFIX/include/stepc.h
 *        PREFIX/share/stepc/models/
 *
 * STEPC_RT_ARCHIVE and STEPC_IR_ARCHIVE, when set, still point `stepc build` at other archives. */
#ifndef STEPC_LAYOUT_H
#define STEPC_LAYOUT_H

#include <limits.h>
#include <stddef.h>

#define STEPC_LAYOUT_FILE "stepc-layout.txt"

typedef struct {
  char rt_archive[PATH_MAX];  /* libstepc_rt.a: the runtime inside every libstep.so */
  char ir_archive[PATH_MAX];  /* libstepc_ir.a: the op table the runtime's CPU executor uses */
  char api_header[PATH_MAX];  /* stepc.h: copied into every artifact */
  char models[PATH_MAX];      /* the shipped recipes, where stepc.recipe(name) looks */
  char origin[PATH_MAX + 64]; /* how they were found, for error messages */
} StepcLayout;

/* Fills *l for the stepc executable at exe by the rule above. The files need not exist (their
 * users say which is missing). Returns 0, or -1 with err saying why (a malformed layout file). */
int stepc_layout_find(const char *exe, StepcLayout *l, char *err, size_t nerr);

/* 0 when the files an artifact links from (all but models) can be read; else -1 with err naming
 * the first that cannot and where this stepc looked. */
int stepc_layout_check(const StepcLayout *l, char *err, size_t nerr);

/* The layout of the running executable (/proc/self/exe) with the environment's overrides applied. */
int stepc_layout_self(StepcLayout *l, char *err, size_t nerr);

/* The shipped recipes' folder of the running executable, or NULL when it has none (the frontend's
 * default then applies). Resolved once. */
const char *stepc_models_dir(void);

#endif
