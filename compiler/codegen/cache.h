/* cache.h — the artifact cache's pieces (cache.c uses them; tests/unit/cache_files.c tests them):
 * a directory only its user can write, a manifest of checksums written last and checked before an
 * entry is trusted (SHA-256: runtime/sha256.h, the one the rendezvous uses). */
#ifndef STEPC_CODEGEN_CACHE_H
#define STEPC_CODEGEN_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/sha256.h"

/* Finishes s and writes its digest as 64 lowercase hex digits and a NUL. */
void sha256_hex(Sha256 *s, char out[65]);

/* The file in every cache entry that lists its files' sizes and SHA-256, written last. */
#define CACHE_MANIFEST "stepc.manifest"

/* The cache root for the environment: $STEPC_CACHE_DIR/artifacts, else
 * $XDG_CACHE_HOME/stepc/artifacts, else $HOME/.cache/stepc/artifacts, else
 * ${TMPDIR:-/tmp}/stepc-<uid>/artifacts. Creates what is missing with mode 0700 and checks the
 * path (cache_dir_check). 0, or -1 with the reason in err. */
int cache_root(char *out, size_t n, char *err, size_t nerr);

/* Refuses a cache path another user could change: every directory from `own` on (the part stepc
 * creates: "$HOME/.cache/stepc", "/tmp/stepc-0") must be a real directory (no symbolic link)
 * owned by this user and writable by nobody else; above it, a directory writable by others must
 * be sticky (/tmp) and then what lies in it must be this user's. 0, or -1 with the reason in err. */
int cache_dir_check(const char *path, size_t own, char *err, size_t nerr);

/* Writes DIR/stepc.manifest for every regular file in DIR (flat). 0, or -1 with errno. */
int cache_manifest_write(const char *dir);

/* 1 when DIR is an entry to trust: this user's, writable by no one else, its manifest lists
 * libstep.so and step.img and every listed file has its size and checksum. 0 otherwise, with what
 * is wrong in why. */
int cache_entry_ok(const char *dir, char *why, size_t nwhy);

#endif
