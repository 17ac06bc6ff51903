/* cache_files.c — the artifact cache's defences without building anything (compiler/codegen/
 * cache_dir.c, cache_manifest.c, sha256.c): SHA-256 against FIPS 180-4's vectors, a cache path
 * another user could change is refused, and an entry is trusted only while its manifest holds. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/cache.h"

static int failures;
#define CHECK(cond)                                                                                          \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                               \
      failures++;                                                                                            \
    }                                                                                                        \
  } while (0)

static void sha(const char *text, size_t reps, const char *want) {
  Sha256 s;
  char hex[65];
  sha256_init(&s);
  for (size_t i = 0; i < reps; i++)
    sha256_update(&s, text, strlen(text));
  sha256_hex(&s, hex);
  CHECK(strcmp(hex, want) == 0);
}

static void test_sha256(void) {
  sha("abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  sha("", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  sha("a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static char root[256];

static int check(const char *rel, size_t own_extra, char *err, size_t nerr) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", root, rel);
  return cache_dir_check(p, strlen(root) + own_extra, err, nerr);
}

static void test_dir_check(void) {
  char err[400], p[512];
  CHECK(check("a/stepc/artifacts", 2, err, sizeof err) == 0);
  struct stat sb;
  snprintf(p, sizeof p, "%s/a/stepc", root);
  CHECK(stat(p, &sb) == 0 && (sb.st_mode & 0777) == 0700);
  chmod(p, 0777); /* planted or loosened: refused */
  CHECK(check("a/stepc/artifacts", 2, err, sizeof err) != 0 && strstr(err, "writable by every user"));
  chmod(p, 0770);
  CHECK(check("a/stepc/artifacts", 2, err, sizeof err) != 0 && strstr(err, "writable by its group"));
  chmod(p, 0700);
  /* a symbolic link where stepc's own directory belongs */
  snprintf(p, sizeof p, "%s/b", root);
  mkdir(p, 0700);
  char l[512];
  snprintf(l, sizeof l, "%s/b/stepc", root);
  snprintf(p, sizeof p, "%s/a/stepc", root);
  CHECK(symlink(p, l) == 0);
  CHECK(check("b/stepc/artifacts", 2, err, sizeof err) != 0 && strstr(err, "symbolic link"));
  /* a world-writable, non-sticky directory above: anyone could swap the cache */
  snprintf(p, sizeof p, "%s/open", root);
  mkdir(p, 0700);
  chmod(p, 0777);
  CHECK(check("open/stepc/artifacts", 5, err, sizeof err) != 0 && strstr(err, "not sticky"));
  /* a sticky shared directory (like /tmp): what lies in it must be ours, even above `own` */
  snprintf(p, sizeof p, "%s/shared", root);
  mkdir(p, 0700);
  chmod(p, 01777);
  snprintf(p, sizeof p, "%s/shared/x", root);
  mkdir(p, 0755);
  CHECK(check("shared/x/stepc/artifacts", 9, err, sizeof err) == 0);
  if (geteuid() == 0) { /* another user's directory in the shared one */
    CHECK(chown(p, 65534, 65534) == 0);
    CHECK(check("shared/x/stepc/artifacts", 9, err, sizeof err) != 0 && strstr(err, "belongs to uid 65534"));
  }
}

static void put(const char *dir, const char *name, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (f) fputs(text, f), fclose(f);
}

static void test_manifest(void) {
  char dir[512], why[400], p[512];
  snprintf(dir, sizeof dir, "%s/entry", root);
  mkdir(dir, 0700);
  put(dir, "libstep.so", "library bytes");
  put(dir, "step.img", "image bytes");
  CHECK(!cache_entry_ok(dir, why, sizeof why) && strstr(why, "no manifest")); /* planted or unfinished */
  CHECK(cache_manifest_write(dir) == 0);
  CHECK(cache_entry_ok(dir, why, sizeof why));
  snprintf(p, sizeof p, "%s/libstep.so", dir);
  CHECK(truncate(p, 4) == 0);
  CHECK(!cache_entry_ok(dir, why, sizeof why) && strstr(why, "libstep.so does not match"));
  put(dir, "libstep.so", "library byteZ"); /* same size, one byte changed */
  CHECK(!cache_entry_ok(dir, why, sizeof why) && strstr(why, "libstep.so does not match"));
  put(dir, "libstep.so", "library bytes");
  CHECK(cache_entry_ok(dir, why, sizeof why));
  snprintf(p, sizeof p, "%s/step.img", dir);
  unlink(p);
  CHECK(!cache_entry_ok(dir, why, sizeof why) && strstr(why, "step.img"));
  put(dir, "step.img", "image bytes");
  CHECK(cache_entry_ok(dir, why, sizeof why));
  chmod(dir, 0777);
  CHECK(!cache_entry_ok(dir, why, sizeof why));
  chmod(dir, 0700);
  /* a manifest that does not list the library is not an entry */
  put(dir, CACHE_MANIFEST, "stepc cache manifest 1\n");
  CHECK(!cache_entry_ok(dir, why, sizeof why) && strstr(why, "does not list"));
}

int main(void) {
  snprintf(root, sizeof root, "/tmp/stepc_cache_test.XXXXXX");
  if (!mkdtemp(root)) return perror("mkdtemp"), 1;
  test_sha256();
  test_dir_check();
  test_manifest();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
