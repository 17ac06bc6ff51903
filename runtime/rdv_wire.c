/* rdv_wire.c — the rendezvous messages and the job secret (rdv_wire.h). */
#define _GNU_SOURCE
#include "runtime/rdv_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "runtime/sha256.h"

static const char CHALLENGE_MAGIC[8] = "STEPCRDC", HELLO_MAGIC[8] = "STEPCRDH";
enum { HELLO_SIGNED = RDV_HELLO_BYTES - SHA256_BYTES, WELCOME_SIGNED = RDV_WELCOME_BYTES - SHA256_BYTES };

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

/* The MAC of a message: the label keeps a hello's MAC from ever passing as a welcome's. */
static void mac(const char *secret, const char *label, const unsigned char *n1, const unsigned char *n2,
                const unsigned char *body, size_t nbody, unsigned char out[SHA256_BYTES]) {
  const void *parts[4] = {label, n1, n2 ? n2 : n1, body};
  size_t lens[4] = {strlen(label) + 1, RDV_NONCE_BYTES, n2 ? RDV_NONCE_BYTES : 0, nbody};
  hmac_sha256(secret, strlen(secret), parts, lens, 4, out);
}

/* RDV_OK when the MAC after buf's first nsigned bytes is the one the secret gives. */
static int verify(const char *secret, const char *label, const unsigned char *n1, const unsigned char *n2,
                  const unsigned char *buf, size_t nsigned) {
  unsigned char want[SHA256_BYTES];
  mac(secret, label, n1, n2, buf, nsigned, want);
  return sha256_equal(want, buf + nsigned, SHA256_BYTES) ? RDV_OK : RDV_BAD_MAC;
}

/* A string field of n bytes, terminated within them whatever the peer sent. */
static void get_str(char *dst, const unsigned char *src, size_t n) {
  memcpy(dst, src, n);
  dst[n - 1] = 0;
}

void rdv_challenge_encode(const unsigned char nonce[RDV_NONCE_BYTES],
                          unsigned char out[RDV_CHALLENGE_BYTES]) {
  memcpy(out, CHALLENGE_MAGIC, 8);
  put32(out + 8, RDV_PROTOCOL), put32(out + 12, 0);
  memcpy(out + 16, nonce, RDV_NONCE_BYTES);
}

int rdv_challenge_decode(const unsigned char *buf, size_t n, unsigned char nonce[RDV_NONCE_BYTES]) {
  if (n < RDV_CHALLENGE_BYTES || memcmp(buf, CHALLENGE_MAGIC, 8) || get32(buf + 8) != RDV_PROTOCOL)
    return RDV_NOT_OURS;
  memcpy(nonce, buf + 16, RDV_NONCE_BYTES);
  return RDV_OK;
}

int rdv_hello_magic(const unsigned char *buf) { return memcmp(buf, HELLO_MAGIC, 8) == 0; }

void rdv_hello_encode(const RdvHello *h, const unsigned char srv_nonce[RDV_NONCE_BYTES], const char *secret,
                      unsigned char out[RDV_HELLO_BYTES]) {
  memset(out, 0, RDV_HELLO_BYTES);
  memcpy(out, HELLO_MAGIC, 8);
  put32(out + 8, RDV_PROTOCOL), put32(out + 12, (uint32_t)h->rank), put32(out + 16, (uint32_t)h->size);
  put64(out + 24, h->fingerprint), put64(out + 32, h->plan_hash);
  memcpy(out + 40, h->what, strnlen(h->what, RDV_WHAT_BYTES - 1));
  memcpy(out + 40 + RDV_WHAT_BYTES, h->nonce, RDV_NONCE_BYTES);
  mac(secret, "stepc hello", srv_nonce, NULL, out, HELLO_SIGNED, out + HELLO_SIGNED);
}

int rdv_hello_decode(const unsigned char *buf, size_t n, const unsigned char srv_nonce[RDV_NONCE_BYTES],
                     const char *secret, RdvHello *h) {
  if (n < RDV_HELLO_BYTES || !rdv_hello_magic(buf) || get32(buf + 8) != RDV_PROTOCOL) return RDV_NOT_OURS;
  h->rank = (int32_t)get32(buf + 12), h->size = (int32_t)get32(buf + 16);
  h->fingerprint = get64(buf + 24), h->plan_hash = get64(buf + 32);
  get_str(h->what, buf + 40, RDV_WHAT_BYTES);
  memcpy(h->nonce, buf + 40 + RDV_WHAT_BYTES, RDV_NONCE_BYTES);
  return verify(secret, "stepc hello", srv_nonce, NULL, buf, HELLO_SIGNED);
}

void rdv_welcome_encode(const RdvWelcome *w, const unsigned char cli_nonce[RDV_NONCE_BYTES],
                        const unsigned char srv_nonce[RDV_NONCE_BYTES], const char *secret,
                        unsigned char out[RDV_WELCOME_BYTES]) {
  memset(out, 0, RDV_WELCOME_BYTES);
  put32(out, w->ok ? 1 : 0);
  memcpy(out + 8, w->msg, strnlen(w->msg, RDV_MSG_BYTES - 1));
  memcpy(out + 8 + RDV_MSG_BYTES, w->id, RDV_ID_BYTES);
  mac(secret, "stepc welcome", cli_nonce, srv_nonce, out, WELCOME_SIGNED, out + WELCOME_SIGNED);
}

int rdv_welcome_decode(const unsigned char *buf, size_t n, const unsigned char cli_nonce[RDV_NONCE_BYTES],
                       const unsigned char srv_nonce[RDV_NONCE_BYTES], const char *secret, RdvWelcome *w) {
  if (n < RDV_WELCOME_BYTES) return RDV_NOT_OURS;
  w->ok = get32(buf) == 1;
  get_str(w->msg, buf + 8, RDV_MSG_BYTES);
  memcpy(w->id, buf + 8 + RDV_MSG_BYTES, RDV_ID_BYTES);
  return verify(secret, "stepc welcome", cli_nonce, srv_nonce, buf, WELCOME_SIGNED);
}

int rdv_random(void *buf, size_t n) {
  unsigned char *p = buf;
  while (n > 0) {
    ssize_t k = getrandom(p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    p += k, n -= (size_t)k;
  }
  if (n == 0) return 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC); /* a kernel without getrandom (before 3.17) */
  ssize_t k = fd >= 0 ? read(fd, p, n) : -1;
  if (fd >= 0) close(fd);
  return k == (ssize_t)n ? 0 : -1;
}

const char *rdv_secret_from_env(char *why, size_t nwhy) {
  const char *s = getenv(RDV_SECRET_ENV);
  size_t n = s ? strlen(s) : 0;
  if (n >= RDV_SECRET_MIN && n <= RDV_SECRET_MAX) return s;
  if (!s || !n)
    snprintf(why, nwhy,
             "no job secret: set %s to one random string, the same on every rank and known to no one else "
             "(e.g. export %s=$(openssl rand -hex 32) before torchrun, srun or mpirun; stepc run --nproc "
             "makes its own)",
             RDV_SECRET_ENV, RDV_SECRET_ENV);
  else
    snprintf(why, nwhy, "%s has %zu characters; it must have %d to %d (e.g. $(openssl rand -hex 32))",
             RDV_SECRET_ENV, n, RDV_SECRET_MIN, RDV_SECRET_MAX);
  return NULL;
}
