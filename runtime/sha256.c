/* sha256.c — SHA-256 and HMAC-SHA256 (sha256.h), after FIPS 180-4 §6.2 and RFC 2104. */
#include "runtime/sha256.h"

#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void block(Sha256 *s, const unsigned char *p) {
  uint32_t w[64], v[8];
  for (int i = 0; i < 16; i++)
    w[i] =
        (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  memcpy(v, s->h, sizeof v);
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = v[7] + (ror(v[4], 6) ^ ror(v[4], 11) ^ ror(v[4], 25)) + ((v[4] & v[5]) ^ (~v[4] & v[6])) +
                  K[i] + w[i];
    uint32_t t2 =
        (ror(v[0], 2) ^ ror(v[0], 13) ^ ror(v[0], 22)) + ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
    memmove(v + 1, v, 7 * sizeof *v);
    v[4] += t1;
    v[0] = t1 + t2;
  }
  for (int i = 0; i < 8; i++)
    s->h[i] += v[i];
}

void sha256_init(Sha256 *s) {
  static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, H0, sizeof H0);
  s->bytes = 0, s->nbuf = 0;
}

void sha256_update(Sha256 *s, const void *data, size_t n) {
  const unsigned char *p = data;
  s->bytes += n;
  while (n > 0) {
    size_t k = 64 - s->nbuf < n ? 64 - s->nbuf : n;
    memcpy(s->buf + s->nbuf, p, k);
    s->nbuf += k, p += k, n -= k;
    if (s->nbuf == 64) block(s, s->buf), s->nbuf = 0;
  }
}

void sha256_final(Sha256 *s, unsigned char out[SHA256_BYTES]) {
  uint64_t bits = s->bytes * 8;
  unsigned char pad[72] = {0x80};
  size_t npad = (s->nbuf < 56 ? 56 : 120) - s->nbuf; /* to 56 mod 64, then the 8-byte length */
  for (int i = 0; i < 8; i++)
    pad[npad + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
  sha256_update(s, pad, npad + 8);
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 4; j++)
      out[4 * i + j] = (unsigned char)(s->h[i] >> (24 - 8 * j));
}

void sha256(const void *data, size_t n, unsigned char out[SHA256_BYTES]) {
  Sha256 s;
  sha256_init(&s);
  sha256_update(&s, data, n);
  sha256_final(&s, out);
}

void hmac_sha256(const void *key, size_t nkey, const void *const *parts, const size_t *lens, int nparts,
                 unsigned char out[SHA256_BYTES]) {
  unsigned char k[64] = {0}, pad[64], inner[SHA256_BYTES];
  if (nkey > 64)
    sha256(key, nkey, k); /* a long key is hashed first (RFC 2104 §2) */
  else if (nkey)
    memcpy(k, key, nkey);
  Sha256 s;
  for (int i = 0; i < 64; i++)
    pad[i] = k[i] ^ 0x36;
  sha256_init(&s);
  sha256_update(&s, pad, 64);
  for (int i = 0; i < nparts; i++)
    sha256_update(&s, parts[i], lens[i]);
  sha256_final(&s, inner);
  for (int i = 0; i < 64; i++)
    pad[i] = k[i] ^ 0x5c;
  sha256_init(&s);
  sha256_update(&s, pad, 64);
  sha256_update(&s, inner, sizeof inner);
  sha256_final(&s, out);
}

int sha256_equal(const unsigned char *a, const unsigned char *b, size_t n) {
  unsigned char d = 0;
  for (size_t i = 0; i < n; i++)
    d |= a[i] ^ b[i];
  return d == 0;
}
