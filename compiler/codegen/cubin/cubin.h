/* cubin — compiles a kernels.cu to a cubin with NVRTC, cached on disk by content hash.
 *
 * The compiler links libnvrtc only (never libcuda): a cubin can be built on a machine without a
 * GPU and loaded later by the runtime with cuModuleLoadData.
 *
 * Cache: DIR/<16 hex digits>.<arch>.cubin, where the digits are FNV-1a 64 of a format tag, the
 * NVRTC version, the arch, every option and the source. DIR is CubinOptions.cache_dir, else
 * $XDG_CACHE_HOME/stepc, else $HOME/.cache/stepc. Entries are written to a temporary name and
 * renamed, so concurrent compilers never see a half-written cubin. An entry is the cubin and a
 * trailer (its size, FNV-1a checksum and the key); an entry without the trailer (an artifact's
 * <key>.<arch>.cubin link to its plain cubin) must be one whole CUDA ELF image by its own headers.
 * A damaged entry (truncated, a flipped bit, anything after the image) is a miss: the cubin is
 * compiled again and the entry replaced, so it never reaches an artifact or a module load.
 *
 * Diagnostics: on a compile error the message lists each error as
 *   kernels.cu:LINE: error: TEXT
 *       LINE | the source line
 *       in op 'NAME' (kernels.cu:M)       where a preceding line reads `// op: NAME`
 *       in kernels/FILE:L                 inside a `// stepc-file: FILE` ... `// stepc-end-of-file` span
 * followed by NVRTC's own log. */
#ifndef STEPC_NVRTC_H
#define STEPC_NVRTC_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  CUBIN_OK = 0,
  CUBIN_ERR_COMPILE, /* the source did not compile: see the message */
  CUBIN_ERR_NVRTC,   /* NVRTC itself failed (bad option, out of memory) */
  CUBIN_ERR_IO,      /* the cache could not be written (the cubin is still returned) */
} CubinStatus;

typedef struct {
  const char *arch;         /* "sm_90" when NULL; "sm_90a", "sm_100", ... */
  const char *cache_dir;    /* NULL: the default above; "": no cache */
  const char *source_name;  /* the name in diagnostics; "kernels.cu" when NULL */
  const char *const *extra; /* further NVRTC options, e.g. "-lineinfo" */
  int n_extra;
} CubinOptions;

typedef struct {
  unsigned char *data; /* malloc'd ELF image */
  size_t size;
  int from_cache; /* 1 when read from the cache, 0 when compiled now */
  uint64_t key;   /* the cache key */
} Cubin;

/* Compiles `source` (NUL-terminated). On CUBIN_OK or CUBIN_ERR_IO `out` holds the cubin (free it
 * with cubin_free). On any status but CUBIN_OK, *msg is a malloc'd message (free it); else NULL. */
CubinStatus cubin_compile(const char *source, const CubinOptions *opt, Cubin *out, char **msg);

void cubin_free(Cubin *c);

/* The cache key cubin_compile would use (0 if NVRTC cannot report its version). */
uint64_t cubin_cache_key(const char *source, const CubinOptions *opt);

/* 1 when the ELF image defines a function symbol `name` (an extern "C" kernel keeps its name). */
int cubin_has_function(const unsigned char *data, size_t size, const char *name);

/* FNV-1a 64, continued from `h` (start with CUBIN_FNV_OFFSET). */
#define CUBIN_FNV_OFFSET 0xcbf29ce484222325ull
uint64_t cubin_fnv1a(uint64_t h, const void *data, size_t n);

#endif
