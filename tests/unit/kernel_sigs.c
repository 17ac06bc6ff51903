/* kernel_sigs.c — kernels/kernel_list.h against the kernels' declarations in kernels/ (the .cuh files),
 * parameter by parameter: type and name, in order.
 *
 *   kernel_sigs            exit 0 when every row matches, 1 otherwise (each difference printed)
 *   kernel_sigs --print    a table row for every declared kernel, as it should read
 *
 * Every host launch of a hand-written kernel goes through its row (the typed launchers of
 * codegen/launch/launchers.h, the recorder and the launch program by the signature letters), so a row that
 * disagrees with the declaration launches the kernel with its arguments in the wrong places. Sizes
 * alone would not see two pointers swapped: names and types do, and the self-test below proves it
 * on a copy of a real declaration.
 *
 * The declarations are read from the text embedded in the compiler (compiler/codegen/cubin/kernel_text.h), i.e.
 * what NVRTC compiles. The parser knows the two forms kernels/ uses: a plain
 * `extern "C" __global__ void NAME(...)` and a macro whose body declares
 * `extern "C" __global__ void [__launch_bounds__(...)] PARAM(...)`, instantiated at the start of a
 * line as `MACRO(realname, ...)`. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cubin/kernel_text.h"
#include "runtime/rt.h"

#define MAX_DECLS 256
#define MAX_PARAMS 32
#define MAX_MACROS 16

static int failures;
#define CHECK(cond, ...)                                                                                    \
  do {                                                                                                      \
    if (!(cond)) {                                                                                          \
      fflush(stdout); /* the differences printed above come first */                                     \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                              \
      fprintf(stderr, __VA_ARGS__);                                                                         \
      fputc('\n', stderr);                                                                                  \
      failures++;                                                                                           \
    }                                                                                                       \
  } while (0)

/* ---- the table, from the X-macro ---- */

typedef struct {
  const char *letter, *ctype, *pname;
} TArg;
typedef struct {
  const char *name;
  const TArg *arg;
  int n;
} TRow;

#define STEPC_KARG(letter, ctype, pname) {#letter, #ctype, #pname},
#define STEPC_KERNEL(name, params) {#name, (const TArg[]){params}, sizeof((const TArg[]){params}) / sizeof(TArg)},
static const TRow table[] = {
#include "kernels/kernel_list.h"
};
#undef STEPC_KERNEL
#undef STEPC_KARG
#define NROWS ((int)(sizeof table / sizeof table[0]))

/* ---- the declarations, from the embedded text ---- */

typedef struct {
  char ctype[64], pname[64];
} DArg;
typedef struct {
  char name[96];
  const char *file;
  int line;
  int n;
  DArg arg[MAX_PARAMS];
} Decl;

/* A type as compared: identifiers one space apart, `*` attached, `__restrict__` dropped, and the
 * spellings of one type made one ("unsigned int" is "unsigned"). */
static void norm_type(const char *s, size_t len, char *out, size_t cap) {
  size_t o = 0;
  out[0] = 0;
  for (size_t i = 0; i < len;) {
    if (isalnum((unsigned char)s[i]) || s[i] == '_') {
      size_t j = i;
      while (j < len && (isalnum((unsigned char)s[j]) || s[j] == '_')) j++;
      const char *sep = o && out[o - 1] != '*' ? " " : "";
      if (!(j - i == 12 && !strncmp(s + i, "__restrict__", 12)))
        o += (size_t)snprintf(out + o, cap - o, "%s%.*s", sep, (int)(j - i), s + i);
      i = j;
    } else {
      if (s[i] == '*') o += (size_t)snprintf(out + o, cap - o, "*");
      i++;
    }
    if (o >= cap) o = cap - 1;
  }
  static const char *const same[][2] = {{"unsigned int", "unsigned"}, {"long int", "long"},
                                         {"unsigned long long int", "unsigned long long"}, {"signed", "int"},
                                         {"signed int", "int"}};
  for (size_t k = 0; k < sizeof same / sizeof same[0]; k++)
    if (!strcmp(out, same[k][0])) snprintf(out, cap, "%s", same[k][1]);
}

/* The text with comments blanked out (newlines kept, so offsets and line numbers stay). */
static char *strip_comments(const char *t) {
  char *s = strdup(t);
  if (!s) return NULL;
  for (char *p = s; *p;) {
    if (*p == '"' || *p == '\'') { /* a literal: skip it whole */
      char q = *p++;
      while (*p && *p != q) p += p[0] == '\\' && p[1] ? 2 : 1;
      if (*p) p++;
    } else if (p[0] == '/' && p[1] == '*') {
      char *e = strstr(p + 2, "*/");
      e = e ? e + 2 : p + strlen(p);
      for (; p < e; p++)
        if (*p != '\n') *p = ' ';
    } else if (p[0] == '/' && p[1] == '/') {
      for (; *p && *p != '\n'; p++) *p = ' ';
    } else p++;
  }
  return s;
}

static int is_space(char c) { return isspace((unsigned char)c) || c == '\\'; } /* a continuation too */
static const char *skip_ws(const char *p) {
  while (*p && is_space(*p)) p++;
  return p;
}
static const char *word(const char *p, const char *w) { /* past w as a whole word, or NULL */
  size_t n = strlen(w);
  return !strncmp(p, w, n) && !(isalnum((unsigned char)p[n]) || p[n] == '_') ? p + n : NULL;
}
static const char *ident(const char *p, char *out, size_t cap) { /* past an identifier, or NULL */
  const char *q = p;
  while (isalnum((unsigned char)*q) || *q == '_') q++;
  if (q == p || isdigit((unsigned char)*p)) return NULL;
  snprintf(out, cap, "%.*s", (int)(q - p), p);
  return q;
}

/* Parses `extern "C" __global__ void [__launch_bounds__(...)] [__cluster_dims__(...)] NAME(params)`
 * (the attributes in any order) at p into d. */
static int parse_decl(const char *p, Decl *d) {
  const char *q = word(p, "extern");
  if (!q || strncmp(q = skip_ws(q), "\"C\"", 3)) return 0;
  if (!(q = word(skip_ws(q + 3), "__global__")) || !(q = word(skip_ws(q), "void"))) return 0;
  q = skip_ws(q);
  for (const char *lb; (lb = word(q, "__launch_bounds__")) || (lb = word(q, "__cluster_dims__"));) {
    lb = skip_ws(lb);
    if (*lb != '(') return 0;
    int depth = 0;
    do depth += *lb == '(' ? 1 : *lb == ')' ? -1 : 0;
    while (*++lb && depth);
    q = skip_ws(lb);
  }
  if (!(q = ident(q, d->name, sizeof d->name)) || *(q = skip_ws(q)) != '(') return 0;
  d->n = 0;
  for (q++; *q && *q != ')';) {
    const char *e = q;
    while (*e && *e != ',' && *e != ')') e++;
    const char *b = e; /* the parameter's name: the last identifier */
    while (b > q && is_space(b[-1])) b--;
    const char *ne = b;
    while (b > q && (isalnum((unsigned char)b[-1]) || b[-1] == '_')) b--;
    if (b == ne || d->n == MAX_PARAMS) return 0;
    DArg *a = &d->arg[d->n++];
    snprintf(a->pname, sizeof a->pname, "%.*s", (int)(ne - b), b);
    norm_type(q, (size_t)(b - q), a->ctype, sizeof a->ctype);
    q = *e == ',' ? e + 1 : e;
  }
  return *q == ')';
}

static int line_at(const char *text, const char *p) {
  int line = 1;
  for (const char *q = text; q < p; q++) line += *q == '\n';
  return line;
}

/* Start of the logical line holding p (continued lines joined). */
static const char *logical_line(const char *text, const char *p) {
  for (;;) {
    while (p > text && p[-1] != '\n') p--;
    const char *e = p - 1; /* the previous line's end: continued when it ends in a backslash */
    while (e > text && e[-1] != '\n' && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
    if (p == text || e <= text || e[-1] != '\\') return p;
    p = e - 1;
  }
}

/* Every kernel `file`'s text declares, appended to d (n so far, room for cap); returns the new
 * count. */
static int parse_file(const char *file, const char *text, Decl *d, int n, int cap) {
  char *s = strip_comments(text);
  if (!s) return n;
  struct {
    char name[64], param[64];
    Decl d;
  } mac[MAX_MACROS];
  int nm = 0;
  for (const char *p = s; (p = strstr(p, "extern")) != NULL; p++) {
    Decl k = {.file = file, .line = line_at(s, p)};
    if (!parse_decl(p, &k)) continue;
    const char *l = skip_ws(logical_line(s, p));
    const char *q = *l == '#' ? word(skip_ws(l + 1), "define") : NULL;
    if (q && nm < MAX_MACROS && (q = ident(skip_ws(q), mac[nm].name, sizeof mac[nm].name)) && *q == '(' &&
        ident(skip_ws(q + 1), mac[nm].param, sizeof mac[nm].param) && !strcmp(mac[nm].param, k.name)) {
      mac[nm++].d = k; /* a macro's body: the kernels are its instantiations */
      continue;
    }
    if (n < cap) d[n++] = k;
  }
  /* instantiations: MACRO(realname, ...) first on a line */
  for (int m = 0; m < nm; m++)
    for (const char *p = s; (p = strstr(p, mac[m].name)) != NULL; p++) {
      const char *q = word(p, mac[m].name), *l = logical_line(s, p);
      if (!q || skip_ws(l) != p || *(q = skip_ws(q)) != '(' || n == cap) continue;
      Decl k = mac[m].d;
      if (!ident(skip_ws(q + 1), k.name, sizeof k.name)) continue;
      k.line = line_at(s, p);
      d[n++] = k;
    }
  free(s);
  return n;
}

static int parse_all(Decl *d) {
  int n = 0;
  for (int f = 0; f < kernel_file_count; f++) n = parse_file(kernel_files[f].name, kernel_files[f].text, d, n, MAX_DECLS);
  return n;
}

static const Decl *find_decl(const Decl *d, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(d[i].name, name)) return &d[i];
  return NULL;
}

/* The row against the declaration; returns the number of differences, each printed when
 * `say`. A missing or extra parameter counts once. */
static int compare(const TRow *r, const Decl *d, int say) {
  int bad = 0;
  if (r->n != d->n) {
    if (say)
      printf("%s: kernel_list.h lists %d parameters, the declaration (%s:%d) has %d\n", r->name, r->n, d->file,
             d->line, d->n);
    bad++;
  }
  for (int i = 0; i < r->n && i < d->n; i++) {
    char t[64];
    norm_type(r->arg[i].ctype, strlen(r->arg[i].ctype), t, sizeof t);
    int ptr = t[0] && t[strlen(t) - 1] == '*';
    if (strcmp(t, d->arg[i].ctype) || strcmp(r->arg[i].pname, d->arg[i].pname) || ptr != (r->arg[i].letter[0] == 'p')) {
      if (say)
        printf("%s parameter %d: kernel_list.h says \"%s %s\", the declaration (%s:%d) \"%s %s\"\n", r->name, i, t,
               r->arg[i].pname, d->file, d->line, d->arg[i].ctype, d->arg[i].pname);
      bad++;
    }
  }
  return bad;
}

static const TRow *find_row(const char *name) {
  for (int i = 0; i < NROWS; i++)
    if (!strcmp(table[i].name, name)) return &table[i];
  return NULL;
}

/* Every row against its declaration. */
static void test_table(const Decl *d, int nd) {
  int bad = 0;
  for (int i = 0; i < NROWS; i++) {
    const Decl *k = find_decl(d, nd, table[i].name);
    if (!k) {
      printf("%s: listed in kernel_list.h, declared in no kernels/*.cuh\n", table[i].name);
      bad++;
    } else bad += compare(&table[i], k, 1);
  }
  printf("%d kernels checked, %d differences\n", NROWS, bad);
  CHECK(bad == 0, "kernel_list.h disagrees with kernels/ (above)");
}

/* What the runtime generates from the same rows: the handles' names and the signature letters
 * (module.c), which the recorder, image_check, program.txt and the module-load size check read. */
static void test_runtime_strings(void) {
  CHECK(NROWS == (int)RT_K_COUNT, "%d rows, %d handles", NROWS, (int)RT_K_COUNT);
  for (int k = 0; k < NROWS && k < RT_K_COUNT; k++) {
    char sig[MAX_PARAMS + 1] = {0};
    for (int i = 0; i < table[k].n && i < MAX_PARAMS; i++) sig[i] = table[k].arg[i].letter[0];
    CHECK(!strcmp(rt_kernel_name[k], table[k].name), "handle %d is %s, row %s", k, rt_kernel_name[k], table[k].name);
    CHECK(!strcmp(rt_kernel_sig[k], sig), "%s: signature \"%s\", its row \"%s\"", table[k].name, rt_kernel_sig[k], sig);
  }
}

/* Declaration text `src` (no comments, no __launch_bounds__) with parameters i and j swapped
 * (malloc'd). */
static char *swap_params(const char *src, int i, int j) {
  const char *open = strchr(src, '('), *close = open ? strchr(open, ')') : NULL;
  if (!close) return NULL;
  const char *at[MAX_PARAMS + 1];
  int n = 0;
  at[n++] = open + 1;
  for (const char *p = open + 1; p < close && n < MAX_PARAMS; p++)
    if (*p == ',') at[n++] = p + 1;
  at[n] = close + 1; /* at[k] .. at[k+1]-1: parameter k without its comma */
  size_t len = strlen(src) + 1;
  char *out = malloc(len), *o = out;
  if (!out || i >= n || j >= n) return free(out), NULL;
  o += sprintf(o, "%.*s", (int)(at[0] - src), src);
  for (int k = 0; k < n; k++) {
    int from = k == i ? j : k == j ? i : k;
    o += sprintf(o, "%.*s%c", (int)(at[from + 1] - 1 - at[from]), at[from], k + 1 < n ? ',' : ')');
  }
  snprintf(o, len - (size_t)(o - out), "%s", close + 1);
  return out;
}

/* The comparison fails when two parameters of one size are swapped: the real declaration of
 * rmsnorm_forward (norm.cuh), its text copied with two of its arguments exchanged, parsed and
 * compared with the row as above. Swapped pointers to one type differ only by name, pointers to
 * two types (bf16*, float*) by type too, two ints by name. */
static void test_swap_is_caught(const Decl *d, int nd) {
  const TRow *r = find_row("rmsnorm_forward");
  const Decl *real = find_decl(d, nd, "rmsnorm_forward");
  const struct kernel_file *f = kernel_file_find("norm.cuh");
  CHECK(r && real && f, "rmsnorm_forward: no row, declaration or norm.cuh");
  if (!r || !real || !f) return;
  CHECK(compare(r, real, 0) == 0, "the real declaration differs from its row");
  /* the declaration alone, from the embedded file: `extern "C"` up to its body's brace */
  const char *a = strstr(f->text, "extern \"C\" __global__ void rmsnorm_forward(");
  const char *b = a ? strchr(a, '{') : NULL;
  CHECK(a && b, "no rmsnorm_forward declaration in norm.cuh");
  if (!a || !b) return;
  char *text = strndup(a, (size_t)(b - a + 1)), *decl = text ? strip_comments(text) : NULL; /* commas only between parameters */
  free(text);
  static const int pairs[][2] = {{2, 3} /* inp, weight */, {0, 1} /* out (bf16*), rstd (float*) */, {4, 5} /* N, C */};
  for (size_t k = 0; decl && k < sizeof pairs / sizeof pairs[0]; k++) {
    char *sw = swap_params(decl, pairs[k][0], pairs[k][1]);
    Decl got[2];
    int n = sw ? parse_file("norm.cuh (swapped copy)", sw, got, 0, 2) : 0;
    CHECK(n == 1 && got[0].n == r->n, "the swapped copy does not parse: %s", sw ? sw : "(null)");
    if (n == 1) {
      printf("self-test, parameters %d and %d swapped:\n", pairs[k][0], pairs[k][1]);
      CHECK(compare(r, &got[0], 1) == 2, "swapping parameters %d and %d of rmsnorm_forward went unnoticed", pairs[k][0],
            pairs[k][1]);
    }
    free(sw);
  }
  free(decl);
}

static void print_rows(const Decl *d, int nd) {
  static const char *const macro[][2] = {{"int", "KI"}, {"unsigned", "KU"}, {"long", "KL"},
                                         {"unsigned long long", "KQ"}, {"float", "KF"}, {"double", "KD"}};
  for (int i = 0; i < nd; i++) {
    printf("STEPC_KERNEL(%s,", d[i].name);
    for (int k = 0; k < d[i].n; k++) {
      const DArg *a = &d[i].arg[k];
      const char *m = NULL;
      for (size_t j = 0; j < sizeof macro / sizeof macro[0]; j++)
        if (!strcmp(a->ctype, macro[j][0])) m = macro[j][1];
      if (a->ctype[strlen(a->ctype) - 1] == '*') printf(" KP(%s, %s)", a->ctype, a->pname);
      else if (m) printf(" %s(%s)", m, a->pname);
      else printf(" ?(%s %s)", a->ctype, a->pname); /* a type kernel_list.h cannot express */
    }
    printf(")\n");
  }
}

int main(int argc, char **argv) {
  static Decl d[MAX_DECLS];
  int nd = parse_all(d);
  if (argc > 1 && !strcmp(argv[1], "--print")) {
    print_rows(d, nd);
    return 0;
  }
  CHECK(nd >= NROWS, "%d declarations parsed, %d rows", nd, NROWS);
  test_table(d, nd);
  test_runtime_strings();
  test_swap_is_caught(d, nd);
  if (failures) fprintf(stderr, "%d failures\n", failures);
  return failures ? 1 : 0;
}
