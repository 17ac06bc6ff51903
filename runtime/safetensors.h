/* safetensors.h — a small reader and writer of the safetensors format (Hugging Face):
 *
 *   8 bytes    N, little-endian u64: the header's length
 *   N bytes    JSON: {"NAME": {"dtype": "BF16", "shape": [..], "data_offsets": [BEGIN, END]}, ...,
 *                     "__metadata__": {"key": "value", ...}}   (padded with spaces to 8 bytes)
 *   the data   each tensor's bytes, row-major, little-endian, at [BEGIN, END) after the header
 *
 * The writer streams: it takes every entry's shape up front (so the header can be written
 * first), then each tensor's bytes in order, so a checkpoint never needs all tensors in host
 * memory at once. It writes PATH.tmp (created new: an existing one is refused) and renames it
 * into place; a PATH that exists and is not a regular file (a symbolic link, a directory, a
 * device, a FIFO) is refused, never replaced. The reader parses the header and reads one tensor
 * at a time; it opens only a regular file (runtime/safe_file.h). Errors come back as -1 with a message;
 * nothing prints. */
#ifndef STEPC_SAFETENSORS_H
#define STEPC_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ST_NAME_MAX 128
#define ST_MAX_DIMS 8

typedef struct {
  char name[ST_NAME_MAX];
  char dtype[8]; /* "F32", "BF16", "I32", "F64", "I64", "U8", "F16" */
  int ndim;
  int64_t shape[ST_MAX_DIMS];
  uint64_t begin, end; /* byte range in the data section */
} StEntry;

/* Bytes per element of a safetensors dtype name, 0 when unknown. */
size_t st_dtype_size(const char *dtype);
/* Elements of an entry (product of its shape; 1 for a scalar). */
int64_t st_numel(const StEntry *e);

typedef struct {
  FILE *f;
  uint64_t data_start;
  StEntry *e;
  int n;
  char path[512];
} StReader;

int st_open(StReader *r, const char *path, char *err, size_t nerr);
const StEntry *st_find(const StReader *r, const char *name); /* NULL when absent */
/* Reads the entry's end - begin bytes into dst. */
int st_read(StReader *r, const StEntry *e, void *dst, char *err, size_t nerr);
void st_close(StReader *r);

typedef struct {
  FILE *f;
  const StEntry *e;
  int n, next;
  char path[512], tmp[520];
} StWriter;

/* entries' begin/end are computed here (in order, packed); metadata: n_meta key/value string
 * pairs (may be 0). The entries array must outlive the writer. */
int st_write_begin(StWriter *w, const char *path, StEntry *entries, int n, const char *const *meta_kv,
                   int n_meta, char *err, size_t nerr);
/* The bytes of entry w->next (its end - begin bytes). */
int st_write_next(StWriter *w, const void *data, char *err, size_t nerr);
/* Closes and renames into place; on failure removes the temporary file. */
int st_write_end(StWriter *w, char *err, size_t nerr);
void st_write_abort(StWriter *w);

#endif
