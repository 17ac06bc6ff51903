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
  long long world;      /* data-parallel ranks that wrote it; 1 when absent (before data parallel) */
  long long tp, ep;     /* tensor / expert-parallel ranks that wrote it (1 when absent): above 1, every
                           rank's state is in its shard.rank<N>.safetensors */
  bool sharded;         /* the optimizer state is ZeRO-1 shards, one file per rank */
  char fingerprint[17]; /* step_fingerprint, 16 hex digits; "" when absent */
  char recipe[128];     /* the recipe's name as written (for messages); "" when absent */
} CkptState;

/* text: the file's n bytes (NUL-terminated at n); truncated: the file was longer than text. 0, or
 * -1 with err (no path: the caller adds it). */
int ckpt_state_parse(const char *text, size_t n, bool truncated, CkptState *st, char *err, size_t nerr);

/* The size and FNV-1a checksum (16 hex digits) that a version-2 state lists for file name; 0, or
 * -1 when it lists none. */
int ckpt_state_file(const char *text, const char *name, unsigned long long *bytes, char sum[17]);

/* ---- the checkpoint directory (ckpt_files.c) ---- */

/* state.json of dir, read whole into text (cap bytes with the NUL) from a regular file only (a
 * FIFO or a device there is refused, never read forever); *truncated when longer. 0, or -1 with
 * err naming the file. */
int ckpt_state_read(const char *dir, char *text, size_t cap, size_t *n, bool *truncated, char *err,
                    size_t nerr);

/* 1 when name is one of a checkpoint's files (state.json, model.safetensors,
 * optimizer.safetensors, optimizer.rank<N>.safetensors, shard.rank<N>.safetensors); partial: also
 * their NAME.tmp, as a save stopped before its rename leaves them. */
bool ckpt_is_own_file(const char *name, bool partial);

/* Whether a save may replace dir: 0 when it is absent, an empty directory, or a stepc checkpoint
 * (a state.json that parses and only the files a checkpoint holds, all regular files); partial:
 * a save's staging directory (state.json optional, NAME.tmp files allowed). -1 with err naming
 * what is there otherwise. Nothing is changed. */
int ckpt_dir_replaceable(const char *dir, bool partial, char *err, size_t nerr);

#endif
