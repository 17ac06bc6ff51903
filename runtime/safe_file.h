/* safe_file.h — opening the files the runtime reads (step.img, the cubin, checkpoint and
 * safetensors files) and checking the files it replaces, so that a FIFO, a device such as
 * /dev/zero or a directory at one of those paths is an error with its name, never a read that
 * blocks forever or never ends, and a save never renames over something that is not a file.
 * (data.path has its own reader: runtime/cpu/data.c.) */
#ifndef STEPC_SAFE_FILE_H
#define STEPC_SAFE_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Bounds on what is read whole: the step image (its reader takes a payload below 2^40 bytes), a
 * cubin (the kernels of one step are megabytes; 2 GiB is far past any) and a state.json. */
#define STEPC_IMAGE_MAX_BYTES (1ull << 40)
#define STEPC_CUBIN_MAX_BYTES (1ull << 31)
#define STEPC_STATE_MAX_BYTES (64ull << 10)

/* follow: whether a symbolic link at path is followed (0: refused). */
enum { RT_NOFOLLOW = 0, RT_FOLLOW = 1 };

/* path opened for reading: a regular file of at most max_bytes (0: any size), its size in *size
 * (may be NULL). The open never blocks (O_NONBLOCK, cleared once the file is known to be regular).
 * The stream, or NULL with err naming path and what it is. */
FILE *rt_open_regular(const char *path, int follow, uint64_t max_bytes, uint64_t *size, char *err,
                      size_t nerr);

/* 0 when path is absent or a regular file (not a symbolic link), which a writer may replace;
 * -1 with err naming what it is otherwise. */
int rt_check_replaceable(const char *path, char *err, size_t nerr);

/* The FNV-1a 64 hash and size of a regular file (opened as rt_open_regular opens it), read in
 * pieces, never mapped: a file that shrinks while it is read is a short count, not a signal. 0, or
 * -1 with err naming path. */
int rt_file_fnv1a(const char *path, int follow, uint64_t *hash, uint64_t *bytes, char *err, size_t nerr);

/* What the mode's file type is, in words ("a FIFO", "a directory", ...). */
const char *rt_file_kind(unsigned mode);

#endif
