/* ckpt_state.h — a checkpoint's state.json, read without a JSON library: it is one small object
 * that stepc_save_checkpoint wrote (runtime/api_ckpt.c), so the reader checks that shape and takes
 * the keys it needs, refusing anything else with what is wrong. */
#ifndef STEPC_CKPT_STATE_H
#define STEPC_CKPT_STATE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
  long long version; /* 1 or 2 */
  long long step;    /* [0, 2^30]: the LR schedule and the data position are int32 functions of it */
  long long seed;
  long long world;   /* data-parallel ranks that wrote it; 1 when absent (before data parallel) */
  bool sharded;      /* the optimizer state is ZeRO-1 shards, one file per rank */
} CkptState;

/* text: the file's n bytes (NUL-terminated at n); truncated: the file was longer than text. 0, or
 * -1 with err (no path: the caller adds it). */
int ckpt_state_parse(const char *text, size_t n, bool truncated, CkptState *st, char *err, size_t nerr);

/* The size and FNV-1a checksum (16 hex digits) that a version-2 state lists for file name; 0, or
 * -1 when it lists none. */
int ckpt_state_file(const char *text, const char *name, unsigned long long *bytes, char sum[17]);

#endif
