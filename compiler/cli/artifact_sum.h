/* artifact_sum.h — DIR/libstep.sum: libstep.so's size and FNV-1a hash, written by `stepc build`
 * once the library is linked and checked before anything dlopens it (`stepc run DIR`; the
 * artifact's train checks the same file itself). A truncated or damaged libstep.so mapped by the
 * dynamic loader is a SIGBUS in the middle of loading, with no message; checked first, it is an
 * error that says what is wrong and what to do. */
#ifndef STEPC_ARTIFACT_SUM_H
#define STEPC_ARTIFACT_SUM_H

#include <stddef.h>

#define ARTIFACT_SUM_FILE "libstep.sum"

/* Writes DIR/libstep.sum for DIR/libstep.so. 0, or -1 with err. */
int artifact_sum_write(const char *dir, char *err, size_t nerr);
/* 0 when DIR/libstep.so has the size and hash DIR/libstep.sum records; else -1 with why. */
int artifact_sum_check(const char *dir, char *why, size_t nwhy);

#endif
