/* test_layout.c — where a stepc finds its files (compiler/cli/layout.h): the install layout around
 * PREFIX/bin/stepc, a build tree's layout file beside the executable (relative paths from its
 * folder), and a malformed layout file refused with its file:line; stepc_layout_check names a
 * missing file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/layout.h"

static int failures;
#define CHECK(c)                                                                                             \
  do {                                                                                                       \
    if (!(c)) {                                                                                              \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);                                  \
      failures++;                                                                                            \
    }                                                                                                        \
  } while (0)

static char tmp[64];

static void write_file(const char *rel, const char *text) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", tmp, rel);
  FILE *f = fopen(p, "w");
  if (f) fputs(text, f), fclose(f);
}

static void install_layout(void) {
  StepcLayout l;
  char err[512] = "", exe[128], want[256];
  snprintf(exe, sizeof exe, "%s/bin/stepc", tmp);
  CHECK(stepc_layout_find(exe, &l, err, sizeof err) == 0);
  snprintf(want, sizeof want, "%s/bin/../lib/stepc/libstepc_rt.a", tmp);
  CHECK(!strcmp(l.rt_archive, want));
  snprintf(want, sizeof want, "%s/bin/../include/stepc.h", tmp);
  CHECK(!strcmp(l.api_header, want));
  snprintf(want, sizeof want, "%s/bin/../share/stepc/models", tmp);
  CHECK(!strcmp(l.models, want));
  /* nothing is installed there yet: the check names the first missing file and the layout */
  CHECK(stepc_layout_check(&l, err, sizeof err) == -1);
  CHECK(strstr(err, "libstepc_rt.a") && strstr(err, "installed around") && strstr(err, exe));
  mkdir(strcat(strcpy(want, tmp), "/lib"), 0777), mkdir(strcat(want, "/stepc"), 0777);
  mkdir(strcat(strcpy(want, tmp), "/include"), 0777);
  write_file("lib/stepc/libstepc_rt.a", "rt"), write_file("lib/stepc/libstepc_ir.a", "ir");
  write_file("include/stepc.h", "api");
  CHECK(stepc_layout_check(&l, err, sizeof err) == 0);
}

static void layout_file(void) {
  StepcLayout l;
  char err[512] = "", exe[128], want[256];
  snprintf(exe, sizeof exe, "%s/bin/stepc", tmp);
  write_file("bin/" STEPC_LAYOUT_FILE, "# a comment\n\nrt_archive /abs/librt.a\nir_archive rel/libir.a\n"
                                       "api_header /h/stepc.h\nmodels /m\n");
  CHECK(stepc_layout_find(exe, &l, err, sizeof err) == 0);
  CHECK(!strcmp(l.rt_archive, "/abs/librt.a") && !strcmp(l.models, "/m") && !strcmp(l.api_header, "/h/stepc.h"));
  snprintf(want, sizeof want, "%s/bin/rel/libir.a", tmp);
  CHECK(!strcmp(l.ir_archive, want));
  CHECK(strstr(l.origin, STEPC_LAYOUT_FILE) != NULL);
  CHECK(stepc_layout_check(&l, err, sizeof err) == -1 && strstr(err, "/abs/librt.a"));

  write_file("bin/" STEPC_LAYOUT_FILE, "rt_archive /a\nir_archive /b\nheader /c\n");
  CHECK(stepc_layout_find(exe, &l, err, sizeof err) == -1);
  CHECK(strstr(err, STEPC_LAYOUT_FILE ":3: unknown key header") != NULL);
  write_file("bin/" STEPC_LAYOUT_FILE, "rt_archive /a\nir_archive /b\napi_header /c\n");
  CHECK(stepc_layout_find(exe, &l, err, sizeof err) == -1 && strstr(err, "no line for models"));
  write_file("bin/" STEPC_LAYOUT_FILE, "rt_archive\n");
  CHECK(stepc_layout_find(exe, &l, err, sizeof err) == -1 && strstr(err, ":1: expected `key path`"));
  char *longline = malloc(PATH_MAX + 200);
  if (longline) {
    memset(longline, 'x', PATH_MAX + 100), longline[PATH_MAX + 100] = 0;
    memcpy(longline, "models /", 8);
    write_file("bin/" STEPC_LAYOUT_FILE, longline);
    CHECK(stepc_layout_find(exe, &l, err, sizeof err) == -1 && strstr(err, ":1: line too long"));
    free(longline);
  }
}

int main(void) {
  snprintf(tmp, sizeof tmp, "/tmp/stepc-layout.XXXXXX");
  if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;
  char bin[96];
  snprintf(bin, sizeof bin, "%s/bin", tmp);
  mkdir(bin, 0777);
  install_layout();
  layout_file();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
  if (failures) fprintf(stderr, "%d failures\n", failures);
  return failures ? 1 : 0;
}
