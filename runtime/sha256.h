/* sha256.h — SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), small and dependency-free: the
 * rendezvous proves the job's secret with them (rdv_wire.h) without linking a crypto library. */
#ifndef STEPC_SHA256_H
#define STEPC_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_BYTES 32

typedef struct {
  uint32_t h[8];
  uint64_t bytes;        /* message length so far */
  unsigned char buf[64]; /* the block being filled */
  size_t nbuf;
} Sha256;

void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t n);
void sha256_final(Sha256 *s, unsigned char out[SHA256_BYTES]);
void sha256(const void *data, size_t n, unsigned char out[SHA256_BYTES]);

/* HMAC-SHA256 over the concatenation of parts[0..nparts) (lens[i] bytes each), under key. */
void hmac_sha256(const void *key, size_t nkey, const void *const *parts, const size_t *lens, int nparts,
                 unsigned char out[SHA256_BYTES]);

/* 1 when a and b (n bytes) are equal, in time that does not depend on where they differ. */
int sha256_equal(const unsigned char *a, const unsigned char *b, size_t n);

#endif
