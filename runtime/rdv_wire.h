/* rdv_wire.h — the rendezvous' three messages on the wire (comm.c speaks them), and the job secret.
 *
 * The secret is a string every rank of a job holds (STEPC_JOB_SECRET; `stepc run --nproc` makes one
 * per job) and nobody else: a rank proves it holds it without sending it, by challenge-response.
 *
 *   rank 0 -> rank r   challenge  "STEPCRDV", protocol, rank 0's fresh random nonce
 *   rank r -> rank 0   hello      rank, world size, fingerprint, plan hash, artifact, rank r's nonce,
 *                                 HMAC-SHA256(secret, "stepc hello" | rank 0's nonce | those fields)
 *   rank 0 -> rank r   welcome    ok, message, NCCL's id,
 *                                 HMAC-SHA256(secret, "stepc welcome" | both nonces | those fields)
 *
 * A hello whose MAC is wrong comes from someone without the secret (or from a rank given another
 * one); a replayed hello fails because rank 0's nonce is new on every connection. The welcome's MAC
 * proves to rank r that rank 0 — not whoever listens at MASTER_ADDR:MASTER_PORT — answered. Every
 * integer is little-endian at a fixed offset, so the format does not depend on a C struct's layout.
 * Decoders take any bytes (tests/fuzz/fuzz_hello.c fuzzes them). */
#ifndef STEPC_RDV_WIRE_H
#define STEPC_RDV_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define RDV_SECRET_ENV "STEPC_JOB_SECRET"
#define RDV_SECRET_MIN 16 /* characters: shorter secrets are refused as guessable */
#define RDV_SECRET_MAX 256
#define RDV_PROTOCOL 2 /* 1 was the unauthenticated hello */
#define RDV_NONCE_BYTES 32
#define RDV_WHAT_BYTES 128
#define RDV_MSG_BYTES 384
#define RDV_ID_BYTES 128 /* RT_COMM_ID_BYTES */
#define RDV_CHALLENGE_BYTES (8 + 4 + 4 + RDV_NONCE_BYTES)
#define RDV_HELLO_BYTES (8 + 4 * 4 + 8 + 8 + RDV_WHAT_BYTES + RDV_NONCE_BYTES + 32)
#define RDV_WELCOME_BYTES (4 + 4 + RDV_MSG_BYTES + RDV_ID_BYTES + 32)

enum { RDV_OK = 0, RDV_NOT_OURS = 1, RDV_BAD_MAC = 2 };

typedef struct {
  int32_t rank, size;
  uint64_t fingerprint, plan_hash;
  char what[RDV_WHAT_BYTES];            /* NUL-terminated after decoding */
  unsigned char nonce[RDV_NONCE_BYTES]; /* the joining rank's, for the welcome's MAC */
} RdvHello;

typedef struct {
  int ok;
  char msg[RDV_MSG_BYTES]; /* NUL-terminated after decoding */
  unsigned char id[RDV_ID_BYTES];
} RdvWelcome;

void rdv_challenge_encode(const unsigned char nonce[RDV_NONCE_BYTES], unsigned char out[RDV_CHALLENGE_BYTES]);
/* RDV_OK with rank 0's nonce, or RDV_NOT_OURS (n short, another magic or protocol). */
int rdv_challenge_decode(const unsigned char *buf, size_t n, unsigned char nonce[RDV_NONCE_BYTES]);

void rdv_hello_encode(const RdvHello *h, const unsigned char srv_nonce[RDV_NONCE_BYTES], const char *secret,
                      unsigned char out[RDV_HELLO_BYTES]);
/* 1 when buf's first 8 bytes are a hello's magic: a connection that sends anything else is no rank. */
int rdv_hello_magic(const unsigned char *buf);
/* RDV_OK (h filled); RDV_NOT_OURS (n short, another magic or protocol: not a stepc rank);
 * RDV_BAD_MAC (a stepc hello that does not prove `secret` over this nonce; h filled, untrusted). */
int rdv_hello_decode(const unsigned char *buf, size_t n, const unsigned char srv_nonce[RDV_NONCE_BYTES],
                     const char *secret, RdvHello *h);

void rdv_welcome_encode(const RdvWelcome *w, const unsigned char cli_nonce[RDV_NONCE_BYTES],
                        const unsigned char srv_nonce[RDV_NONCE_BYTES], const char *secret,
                        unsigned char out[RDV_WELCOME_BYTES]);
/* RDV_OK (w filled), RDV_NOT_OURS (n short) or RDV_BAD_MAC (w filled, untrusted). */
int rdv_welcome_decode(const unsigned char *buf, size_t n, const unsigned char cli_nonce[RDV_NONCE_BYTES],
                       const unsigned char srv_nonce[RDV_NONCE_BYTES], const char *secret, RdvWelcome *w);

/* n bytes from the kernel's random source (getrandom, else /dev/urandom): 0, or -1. */
int rdv_random(void *buf, size_t n);
/* The job secret from the environment: NULL with why (none, too short, too long). */
const char *rdv_secret_from_env(char *why, size_t nwhy);

#endif
