/* cubin.c — kernels.cu -> cubin through NVRTC, with an on-disk cache (see cubin.h). */
#include "codegen/cubin/cubin.h"
#include "ir.h"

#include <elf.h>
#include <errno.h>
#include <nvrtc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/cubin/kernel_text.h"
#include "codegen/cubin/textbuf.h"

#define CUBIN_FORMAT_TAG "stepc-cubin-1"
#define CUBIN_MAX_OPTIONS 64
#define CUBIN_MAX_REPORTED_ERRORS 20

uint64_t cubin_fnv1a(uint64_t h, const void *data, size_t n) { return ir_fnv1a(h, data, n); }

static char *msg_dup(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *msg_dup(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (!s) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* ---- options and key ---- */

static int build_options(const CubinOptions *opt, const char **argv, char *arch_opt, size_t arch_sz) {
  const char *arch = opt && opt->arch ? opt->arch : "sm_90";
  int n = 0;
  /* Hopper's cubin is built for sm_90a, the architecture-specific target that has wgmma (the MoE
   * grouped GEMMs use it); such a cubin runs on compute capability 9.0, which is every Hopper. */
  snprintf(arch_opt, arch_sz, "--gpu-architecture=%s%s", arch, strcmp(arch, "sm_90") == 0 ? "a" : "");
  argv[n++] = arch_opt;
  argv[n++] = "-std=c++17";
  for (int i = 0; opt && i < opt->n_extra && n < CUBIN_MAX_OPTIONS; i++)
    argv[n++] = opt->extra[i];
  return n;
}

static uint64_t key_of(const char *source, const char *const *argv, int argc) {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return 0;
  uint64_t h = cubin_fnv1a(CUBIN_FNV_OFFSET, CUBIN_FORMAT_TAG, sizeof CUBIN_FORMAT_TAG);
  int ver[2] = {major, minor};
  h = cubin_fnv1a(h, ver, sizeof ver);
  for (int i = 0; i < argc; i++)
    h = cubin_fnv1a(h, argv[i], strlen(argv[i]) + 1);
  return cubin_fnv1a(h, source, strlen(source));
}

uint64_t cubin_cache_key(const char *source, const CubinOptions *opt) {
  const char *argv[CUBIN_MAX_OPTIONS];
  char arch_opt[96];
  int argc = build_options(opt, argv, arch_opt, sizeof arch_opt);
  return key_of(source, argv, argc);
}

/* ---- the cache ---- */

/* The cache directory into buf; 0 when there is none (disabled, or no HOME). */
static int cache_dir(const CubinOptions *opt, char *buf, size_t sz) {
  if (opt && opt->cache_dir) {
    if (!opt->cache_dir[0]) return 0;
    snprintf(buf, sz, "%s", opt->cache_dir);
    return 1;
  }
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && xdg[0])
    snprintf(buf, sz, "%s/stepc", xdg);
  else if (home && home[0])
    snprintf(buf, sz, "%s/.cache/stepc", home);
  else
    return 0;
  return 1;
}

static int mkdir_p(const char *path) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int is_elf(const unsigned char *d, size_t n) { return n >= 4 && memcmp(d, ELFMAG, SELFMAG) == 0; }

/* A cache entry is the cubin followed by this trailer. The checksum catches a flipped bit, the size
 * a truncation, the key an entry copied under another name. Little-endian u64s, as the host. */
#define CUBIN_TRAILER_MAGIC "stepc-cubin-sum1" /* 16 bytes, no NUL */
_Static_assert(sizeof CUBIN_TRAILER_MAGIC == 17, "the trailer's magic fills its 16 bytes");
typedef struct {
  char magic[16];
  uint64_t size; /* bytes of the cubin before the trailer */
  uint64_t fnv;  /* cubin_fnv1a of those bytes */
  uint64_t key;  /* the cache key the entry was written under */
} CubinTrailer;

/* The bytes a CUDA ELF64 image spans by its own headers: its header, its program and section
 * header tables, and every section's and segment's contents; 0 when the headers are inconsistent
 * or point past n (a truncated or damaged image). */
static size_t elf_extent(const unsigned char *d, size_t n) {
  if (n < sizeof(Elf64_Ehdr) || !is_elf(d, n) || d[EI_CLASS] != ELFCLASS64 || d[EI_DATA] != ELFDATA2LSB)
    return 0;
  Elf64_Ehdr eh;
  memcpy(&eh, d, sizeof eh);
  if (eh.e_machine != EM_CUDA || eh.e_ehsize != sizeof eh || (eh.e_shnum == 0 && eh.e_shoff != 0) ||
      (eh.e_shnum && (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shstrndx >= eh.e_shnum)) ||
      (eh.e_phnum && eh.e_phentsize != sizeof(Elf64_Phdr)))
    return 0;
  size_t end = sizeof eh;
#define SPAN(off, len)                                                                                       \
  do {                                                                                                       \
    uint64_t o_ = (off), l_ = (len);                                                                         \
    if (o_ > n || l_ > n - o_) return 0;                                                                     \
    if (o_ + l_ > end) end = (size_t)(o_ + l_);                                                              \
  } while (0)
  SPAN(eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr));
  SPAN(eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr));
  for (unsigned i = 0; i < eh.e_shnum; i++) {
    Elf64_Shdr sh;
    memcpy(&sh, d + eh.e_shoff + i * sizeof sh, sizeof sh);
    if (sh.sh_type != SHT_NOBITS && sh.sh_type != SHT_NULL) SPAN(sh.sh_offset, sh.sh_size);
  }
  for (unsigned i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    memcpy(&ph, d + eh.e_phoff + i * sizeof ph, sizeof ph);
    SPAN(ph.p_offset, ph.p_filesz);
  }
#undef SPAN
  return end;
}

/* The cubin inside a cache entry of n bytes, or 0 when the entry is damaged. An entry with a
 * trailer must match it (size, checksum, key) and hold a whole ELF; one without (written before
 * the trailer existed, or an artifact's <key>.<arch>.cubin link to its plain kernels.<arch>.cubin)
 * must be exactly one structurally whole ELF image, nothing missing and nothing after it. */
static size_t cache_entry_cubin(const unsigned char *d, size_t n, uint64_t key) {
  CubinTrailer tr;
  if (n > sizeof tr) {
    memcpy(&tr, d + n - sizeof tr, sizeof tr);
    if (memcmp(tr.magic, CUBIN_TRAILER_MAGIC, sizeof tr.magic) == 0)
      return tr.size == n - sizeof tr && tr.key == key &&
                     tr.fnv == cubin_fnv1a(CUBIN_FNV_OFFSET, d, tr.size) && elf_extent(d, tr.size) == tr.size
                 ? tr.size
                 : 0;
  }
  return elf_extent(d, n) == n ? n : 0;
}

static int cache_read(const char *path, uint64_t key, Cubin *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  unsigned char *d = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0) {
    d = malloc((size_t)n);
    if (d && fread(d, 1, (size_t)n, f) != (size_t)n) {
      free(d);
      d = NULL;
    }
  }
  fclose(f);
  size_t size = d ? cache_entry_cubin(d, (size_t)n, key) : 0;
  if (!size) { /* a damaged entry is a miss; the compile overwrites it */
    free(d);
    return 0;
  }
  out->data = d;
  out->size = size;
  return 1;
}

static char *cache_write(const char *dir, const char *path, const Cubin *c) {
  if (mkdir_p(dir) != 0) return msg_dup("cannot create cache directory %s: %s", dir, strerror(errno));
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) return msg_dup("cannot write %s: %s", tmp, strerror(errno));
  CubinTrailer tr = {.size = c->size, .fnv = cubin_fnv1a(CUBIN_FNV_OFFSET, c->data, c->size), .key = c->key};
  memcpy(tr.magic, CUBIN_TRAILER_MAGIC, sizeof tr.magic);
  size_t w = fwrite(c->data, 1, c->size, f) + fwrite(&tr, 1, sizeof tr, f);
  int closed = fclose(f);
  if (w != c->size + sizeof tr || closed != 0 || rename(tmp, path) != 0) {
    int e = errno;
    remove(tmp);
    return msg_dup("cannot write %s: %s", path, strerror(e));
  }
  return NULL;
}

/* ---- diagnostics ---- */

typedef struct {
  const char **start; /* start[i] = first char of line i + 1 */
  int n;
} Lines;

static int lines_index(const char *src, Lines *L) {
  int n = 1;
  for (const char *p = src; *p; p++)
    n += *p == '\n';
  L->start = malloc(sizeof *L->start * (size_t)n);
  if (!L->start) return -1;
  L->n = 0;
  L->start[L->n++] = src;
  for (const char *p = src; *p; p++)
    if (*p == '\n' && L->n < n) L->start[L->n++] = p + 1;
  return 0;
}

static int line_len(const char *s) {
  const char *e = strchr(s, '\n');
  return e ? (int)(e - s) : (int)strlen(s);
}

/* The nearest line at or before `line` (1-based) holding `marker`; 0 if none. */
static int find_marker(const Lines *L, int line, const char *marker, const char **after, int *after_len) {
  size_t mlen = strlen(marker);
  for (int i = line; i >= 1; i--) {
    const char *s = L->start[i - 1];
    int n = line_len(s);
    for (int k = 0; k + (int)mlen <= n; k++) {
      if (memcmp(s + k, marker, mlen) != 0) continue;
      *after = s + k + mlen;
      *after_len = n - k - (int)mlen;
      while (*after_len > 0 && ((*after)[*after_len - 1] == ' ' || (*after)[*after_len - 1] == '\r'))
        (*after_len)--;
      return i;
    }
  }
  return 0;
}

/* NVRTC's log lines read "NAME(LINE): error: TEXT". */
static void format_errors(TextBuf *t, const char *log, const char *name, const char *source) {
  Lines L = {0};
  if (lines_index(source, &L) != 0) return;
  size_t nlen = strlen(name);
  int reported = 0;
  for (const char *p = log; *p && reported < CUBIN_MAX_REPORTED_ERRORS;) {
    int n = line_len(p);
    int line = 0, consumed = 0;
    if (n > (int)nlen + 3 && strncmp(p, name, nlen) == 0 && p[nlen] == '(' &&
        sscanf(p + nlen, "(%d): error: %n", &line, &consumed) == 1 && consumed > 0) {
      const char *text = p + nlen + consumed;
      int tlen = n - (int)nlen - consumed;
      textbuf_printf(t, "%s:%d: error: %.*s\n", name, line, tlen, text);
      if (line >= 1 && line <= L.n) {
        const char *src = L.start[line - 1];
        textbuf_printf(t, "  %5d | %.*s\n", line, line_len(src), src);
        const char *what;
        int wlen, at;
        if ((at = find_marker(&L, line, "// op: ", &what, &wlen)) > 0)
          textbuf_printf(t, "        in op '%.*s' (%s:%d)\n", wlen, what, name, at);
        const char *ignored;
        int ilen;
        if ((at = find_marker(&L, line, KERNEL_FILE_MARKER, &what, &wlen)) > 0 &&
            find_marker(&L, line, KERNEL_FILE_END_MARKER, &ignored, &ilen) < at)
          textbuf_printf(t, "        in kernels/%.*s:%d\n", wlen, what, line - at);
      }
      reported++;
    }
    p += n;
    if (*p == '\n') p++;
  }
  free(L.start);
}

/* ---- compile ---- */

CubinStatus cubin_compile(const char *source, const CubinOptions *opt, Cubin *out, char **msg) {
  memset(out, 0, sizeof *out);
  *msg = NULL;
  const char *argv[CUBIN_MAX_OPTIONS];
  char arch_opt[96];
  int argc = build_options(opt, argv, arch_opt, sizeof arch_opt);
  const char *name = opt && opt->source_name ? opt->source_name : "kernels.cu";
  const char *arch = opt && opt->arch ? opt->arch : "sm_90";
  out->key = key_of(source, argv, argc);

  char dir[4096], path[4200];
  int cached = out->key && cache_dir(opt, dir, sizeof dir);
  if (cached) {
    snprintf(path, sizeof path, "%s/%016llx.%s.cubin", dir, (unsigned long long)out->key, arch);
    if (cache_read(path, out->key, out)) {
      out->from_cache = 1;
      return CUBIN_OK;
    }
  }

  nvrtcProgram prog;
  nvrtcResult r = nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) {
    *msg = msg_dup("nvrtc: cannot create program: %s", nvrtcGetErrorString(r));
    return CUBIN_ERR_NVRTC;
  }
  nvrtcResult cr = nvrtcCompileProgram(prog, argc, argv);
  size_t log_size = 0;
  char *log = NULL;
  if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 0 && (log = malloc(log_size)))
    if (nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = '\0';
  if (cr != NVRTC_SUCCESS) {
    TextBuf t = {0};
    if (cr == NVRTC_ERROR_COMPILATION) {
      textbuf_printf(&t, "%s does not compile for %s:\n", name, arch);
      if (log) format_errors(&t, log, name, source);
    } else {
      textbuf_printf(&t, "nvrtc: %s\n", nvrtcGetErrorString(cr));
    }
    textbuf_printf(&t, "nvrtc log:\n%s", log ? log : "(none)\n");
    free(log);
    nvrtcDestroyProgram(&prog);
    char *text = textbuf_take(&t);
    *msg = text ? text : msg_dup("%s does not compile", name);
    return cr == NVRTC_ERROR_COMPILATION ? CUBIN_ERR_COMPILE : CUBIN_ERR_NVRTC;
  }
  free(log);

  size_t size = 0;
  r = nvrtcGetCUBINSize(prog, &size);
  if (r != NVRTC_SUCCESS || size == 0 || !(out->data = malloc(size)) ||
      (r = nvrtcGetCUBIN(prog, (char *)out->data)) != NVRTC_SUCCESS) {
    free(out->data);
    out->data = NULL;
    nvrtcDestroyProgram(&prog);
    *msg = msg_dup("nvrtc: no cubin for %s (a compute_XX target yields PTX only): %s", arch,
                   nvrtcGetErrorString(r));
    return CUBIN_ERR_NVRTC;
  }
  out->size = size;
  nvrtcDestroyProgram(&prog);
  if (cached && (*msg = cache_write(dir, path, out)) != NULL) return CUBIN_ERR_IO;
  return CUBIN_OK;
}

void cubin_free(Cubin *c) {
  free(c->data);
  c->data = NULL;
  c->size = 0;
}

/* ---- ELF symbol lookup ---- */

int cubin_has_function(const unsigned char *d, size_t n, const char *name) {
  if (!is_elf(d, n) || n < sizeof(Elf64_Ehdr) || d[EI_CLASS] != ELFCLASS64) return 0;
  Elf64_Ehdr eh;
  memcpy(&eh, d, sizeof eh);
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > n ||
      (n - eh.e_shoff) / sizeof(Elf64_Shdr) < eh.e_shnum)
    return 0;
  for (unsigned i = 0; i < eh.e_shnum; i++) {
    Elf64_Shdr sh, strh;
    memcpy(&sh, d + eh.e_shoff + i * sizeof sh, sizeof sh);
    if (sh.sh_type != SHT_SYMTAB || sh.sh_link >= eh.e_shnum || sh.sh_entsize != sizeof(Elf64_Sym)) continue;
    memcpy(&strh, d + eh.e_shoff + sh.sh_link * sizeof strh, sizeof strh);
    if (sh.sh_offset > n || sh.sh_size > n - sh.sh_offset || strh.sh_offset > n ||
        strh.sh_size > n - strh.sh_offset)
      return 0;
    for (size_t k = 0; k < sh.sh_size / sizeof(Elf64_Sym); k++) {
      Elf64_Sym sym;
      memcpy(&sym, d + sh.sh_offset + k * sizeof sym, sizeof sym);
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_name >= strh.sh_size) continue;
      const char *s = (const char *)d + strh.sh_offset + sym.st_name;
      size_t left = strh.sh_size - sym.st_name;
      if (strnlen(s, left) < left && strcmp(s, name) == 0) return 1;
    }
  }
  return 0;
}
