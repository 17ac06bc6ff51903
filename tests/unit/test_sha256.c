/* test_sha256.c — runtime/sha256.c against FIPS 180-4's and RFC 4231's published vectors (the
 * padding's edge lengths included), and rdv_wire.c's messages: a hello round-trips under the secret
 * and fails under another secret, another nonce or one flipped bit. */
#include <stdio.h>
#include <string.h>

#include "runtime/rdv_wire.h"
#include "runtime/sha256.h"

static int failures;
#define CHECK(c, ...)                                                                                        \
  do {                                                                                                       \
    if (!(c)) {                                                                                              \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                                        \
      fprintf(stderr, __VA_ARGS__);                                                                          \
      fprintf(stderr, "\n");                                                                                 \
      failures++;                                                                                            \
    }                                                                                                        \
  } while (0)

static void hex(const unsigned char *d, char out[65]) {
  for (int i = 0; i < 32; i++)
    snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void check_sha(const char *msg, size_t n, const char *want) {
  unsigned char d[32];
  char h[65];
  sha256(msg, n, d);
  hex(d, h);
  CHECK(!strcmp(h, want), "sha256 of %zu bytes: %s, want %s", n, h, want);
}

static void check_hmac(const void *key, size_t nkey, const char *msg, const char *want) {
  unsigned char d[32];
  char h[65];
  const void *parts[2] = {msg, msg + 3}; /* two parts: the concatenation is what is signed */
  size_t lens[2] = {3, strlen(msg) - 3};
  hmac_sha256(key, nkey, parts, lens, 2, d);
  hex(d, h);
  CHECK(!strcmp(h, want), "hmac of \"%s\": %s, want %s", msg, h, want);
}

static void test_vectors(void) {
  static char big[1000000], x[64];
  check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  check_sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  memset(big, 'a', sizeof big);
  check_sha(big, sizeof big, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  memset(x, 'x', sizeof x); /* 55, 56, 64 bytes: the length fits, does not fit, a whole block */
  check_sha(x, 55, "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072");
  check_sha(x, 56, "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e");
  check_sha(x, 64, "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c");
  unsigned char k1[20], k6[131];
  memset(k1, 0x0b, sizeof k1), memset(k6, 0xaa, sizeof k6);
  check_hmac(k1, sizeof k1, "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  check_hmac("Jefe", 4, "what do ya want for nothing?",
             "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  check_hmac(k6, sizeof k6, "Test Using Larger Than Block-Size Key - Hash Key First",
             "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

static void test_hello(void) {
  const char *secret = "the job's secret, 0123456789";
  unsigned char nonce[RDV_NONCE_BYTES], other[RDV_NONCE_BYTES], buf[RDV_HELLO_BYTES];
  memset(nonce, 7, sizeof nonce), memset(other, 8, sizeof other);
  RdvHello h = {.rank = 3, .size = 4, .fingerprint = 0x0123456789abcdefull, .plan_hash = 42}, got;
  snprintf(h.what, sizeof h.what, "art/x");
  memset(h.nonce, 9, sizeof h.nonce);
  rdv_hello_encode(&h, nonce, secret, buf);
  CHECK(rdv_hello_decode(buf, sizeof buf, nonce, secret, &got) == RDV_OK && got.rank == 3 && got.size == 4 &&
            got.fingerprint == h.fingerprint && got.plan_hash == 42 && !strcmp(got.what, "art/x") &&
            !memcmp(got.nonce, h.nonce, sizeof h.nonce),
        "a hello does not round-trip");
  CHECK(rdv_hello_decode(buf, sizeof buf, nonce, "another secret, 0123456789", &got) == RDV_BAD_MAC,
        "another secret passed");
  CHECK(rdv_hello_decode(buf, sizeof buf, other, secret, &got) == RDV_BAD_MAC,
        "a replay to another challenge passed");
  CHECK(rdv_hello_decode(buf, sizeof buf - 1, nonce, secret, &got) == RDV_NOT_OURS, "a short hello passed");
  for (size_t i = 8 + 4; i < sizeof buf; i += 13) { /* past the magic and protocol: the MAC catches it */
    buf[i] ^= 1;
    CHECK(rdv_hello_decode(buf, sizeof buf, nonce, secret, &got) == RDV_BAD_MAC,
          "a flipped bit at %zu passed", i);
    buf[i] ^= 1;
  }
  RdvWelcome w = {.ok = 1}, wg;
  unsigned char wb[RDV_WELCOME_BYTES];
  snprintf(w.msg, sizeof w.msg, "welcome");
  rdv_welcome_encode(&w, h.nonce, nonce, secret, wb);
  CHECK(rdv_welcome_decode(wb, sizeof wb, h.nonce, nonce, secret, &wg) == RDV_OK && wg.ok &&
            !strcmp(wg.msg, "welcome"),
        "a welcome does not round-trip");
  CHECK(rdv_welcome_decode(wb, sizeof wb, nonce, h.nonce, secret, &wg) == RDV_BAD_MAC,
        "a welcome for other nonces passed");
}

int main(void) {
  test_vectors();
  test_hello();
  if (!failures)
    printf("ok: SHA-256 and HMAC-SHA256 match the published vectors; the rendezvous' MACs bind secret and "
           "nonces\n");
  return failures != 0;
}
