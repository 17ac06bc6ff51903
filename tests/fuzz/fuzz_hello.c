/* fuzz_hello.c — libFuzzer target for the rendezvous' messages (runtime/rdv_wire.c): what rank 0
 * parses from anyone who connects to MASTER_PORT (the hello), and what a rank parses from whatever
 * answers there (the challenge, the welcome).
 *
 * Input: one selector byte, then the message. 0 mod 3: a hello; 1: a challenge; 2: a welcome. Every
 * decoded message is checked beyond "no crash": its strings are terminated within their fields,
 * and re-encoding it under the secret gives a message that decodes as authentic to the same fields
 * — so a decoder that mis-reads a field, or a MAC that does not cover it, aborts. Built with
 * -fsanitize=fuzzer it is a fuzzer; built without, replay.c drives it over tests/fuzz/hello/. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/rdv_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SECRET "fuzz_hello's job secret, 0123456789"
static const unsigned char SRV[RDV_NONCE_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8},
                           CLI[RDV_NONCE_BYTES] = {9, 10, 11};

static void require(int ok, const char *what) {
  if (ok) return;
  fprintf(stderr, "fuzz_hello: %s\n", what);
  abort();
}

static void fuzz_hello(const uint8_t *d, size_t n) {
  RdvHello h, again;
  if (rdv_hello_decode(d, n, SRV, SECRET, &h) == RDV_NOT_OURS) return;
  require(memchr(h.what, 0, sizeof h.what) != NULL, "a hello's artifact name is not terminated");
  unsigned char buf[RDV_HELLO_BYTES];
  rdv_hello_encode(&h, SRV, SECRET, buf);
  require(rdv_hello_decode(buf, sizeof buf, SRV, SECRET, &again) == RDV_OK, "a signed hello does not verify");
  require(again.rank == h.rank && again.size == h.size && again.fingerprint == h.fingerprint &&
              again.plan_hash == h.plan_hash && !strcmp(again.what, h.what) &&
              !memcmp(again.nonce, h.nonce, sizeof h.nonce),
          "a hello does not round-trip");
  require(rdv_hello_decode(buf, sizeof buf, CLI, SECRET, &again) == RDV_BAD_MAC,
          "a hello verifies under another challenge");
}

static void fuzz_challenge(const uint8_t *d, size_t n) {
  unsigned char nonce[RDV_NONCE_BYTES], buf[RDV_CHALLENGE_BYTES], again[RDV_NONCE_BYTES];
  if (rdv_challenge_decode(d, n, nonce) != RDV_OK) return;
  rdv_challenge_encode(nonce, buf);
  require(rdv_challenge_decode(buf, sizeof buf, again) == RDV_OK && !memcmp(again, nonce, sizeof nonce),
          "a challenge does not round-trip");
}

static void fuzz_welcome(const uint8_t *d, size_t n) {
  RdvWelcome w, again;
  if (rdv_welcome_decode(d, n, CLI, SRV, SECRET, &w) == RDV_NOT_OURS) return;
  require(memchr(w.msg, 0, sizeof w.msg) != NULL, "a welcome's message is not terminated");
  unsigned char buf[RDV_WELCOME_BYTES];
  rdv_welcome_encode(&w, CLI, SRV, SECRET, buf);
  require(rdv_welcome_decode(buf, sizeof buf, CLI, SRV, SECRET, &again) == RDV_OK,
          "a signed welcome does not verify");
  require(again.ok == w.ok && !strcmp(again.msg, w.msg) && !memcmp(again.id, w.id, sizeof w.id),
          "a welcome does not round-trip");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  /* a copy of exactly the input's length, so that AddressSanitizer sees any read past it */
  uint8_t *d = malloc(size - 1 ? size - 1 : 1);
  if (!d) return 0;
  memcpy(d, data + 1, size - 1);
  int sel = data[0] % 3;
  if (sel == 0)
    fuzz_hello(d, size - 1);
  else if (sel == 1)
    fuzz_challenge(d, size - 1);
  else
    fuzz_welcome(d, size - 1);
  free(d);
  return 0;
}
