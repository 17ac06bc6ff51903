/* step_emit.c — step.c, the generated host step (step_emit.h). */
#include "codegen/step_emit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fingerprint.h"
#include "runtime/cuda/exec.h"
#include "runtime/record.h"
#include "runtime/stepc_gen.h"

/* ---- literals ---- */

static void lit_float(char *b, size_t n, float v) {
  snprintf(b, n, "%.9g", (double)v);
  if (!isfinite(v) || strtof(b, NULL) != v) snprintf(b, n, "%a", (double)v);
  else if (!strpbrk(b, ".e")) strncat(b, ".0", n - strlen(b) - 1);
  strncat(b, "f", n - strlen(b) - 1);
}

static void lit_double(char *b, size_t n, double v) {
  snprintf(b, n, "%.17g", v);
  if (!isfinite(v) || strtod(b, NULL) != v) snprintf(b, n, "%a", v);
  else if (!strpbrk(b, ".e")) strncat(b, ".0", n - strlen(b) - 1);
}

/* A device address as A (arena) or S (scratch) + offset; -1 when it is in neither. */
static int lit_ptr(char *b, size_t n, const RtExec *x, CUdeviceptr p) {
  if (!p) return snprintf(b, n, "0ULL"), 0;
  int64_t size[2] = {rt_exec_arena_bytes(x), rt_exec_scratch_bytes(x)};
  for (int w = 0; w < 2; w++) {
    CUdeviceptr base = rt_exec_base(x, w);
    if (p >= base && p <= base + (CUdeviceptr)size[w]) return snprintf(b, n, "%c + 0x%llxULL", "AS"[w], (unsigned long long)(p - base)), 0;
  }
  return -1;
}

static const char *ARG_TYPE[128] = {['p'] = "unsigned long long", ['q'] = "unsigned long long", ['i'] = "int",
                                    ['u'] = "unsigned", ['l'] = "long long", ['f'] = "float", ['d'] = "double"};

static int emit_launch(FILE *f, const RtExec *x, const RtRec *r, char *err, size_t nerr) {
  const RtDevice *d = rt_exec_device(x);
  const char *sig = rt_ksig(d, r->k), *name = rt_kname(d, r->k);
  fprintf(f, "  {\n   ");
  for (int i = 0; i < r->nargs; i++) {
    char v[80];
    uint64_t a = r->arg[i];
    switch (sig[i]) {
    case 'p':
      if (lit_ptr(v, sizeof v, x, (CUdeviceptr)a))
        return snprintf(err, nerr, "kernel %s argument %d points outside the arena and scratch", name, i), -1;
      break;
    case 'q': snprintf(v, sizeof v, "0x%llxULL", (unsigned long long)a); break;
    case 'i': snprintf(v, sizeof v, "%d", (int)(int32_t)(uint32_t)a); break;
    case 'u': snprintf(v, sizeof v, "%uu", (unsigned)(uint32_t)a); break;
    case 'l': snprintf(v, sizeof v, "%lldLL", (long long)(int64_t)a); break;
    case 'f': {
      uint32_t u = (uint32_t)a;
      float fv;
      memcpy(&fv, &u, 4);
      lit_float(v, sizeof v, fv);
      break;
    }
    case 'd': {
      double dv;
      memcpy(&dv, &a, 8);
      lit_double(v, sizeof v, dv);
      break;
    }
    default: return snprintf(err, nerr, "kernel %s: signature letter '%c'", name, sig[i]), -1;
    }
    fprintf(f, " %s a%d = %s;", ARG_TYPE[(int)sig[i]], i, v);
  }
  fprintf(f, "\n    void *v[] = {");
  for (int i = 0; i < r->nargs; i++) fprintf(f, "%s&a%d", i ? ", " : "", i);
  fprintf(f, "};\n    LAUNCH(%s, %u, %u, %u, %u, %u, v);\n  }\n", name, r->grid[0], r->grid[1], r->grid[2], r->block, r->smem);
  return 0;
}

/* A struct literal of one library call's fields (an X-macro list: I int64_t, P device pointer, F
 * float) read from `rec`; bad is set when a pointer is outside the arena and scratch. */
#define EM_I(fl) fprintf(f, "%s." #fl " = %lld", sep, (long long)rec->fl), sep = ", ";
#define EM_P(fl) bad |= lit_ptr(v, sizeof v, x, rec->fl), fprintf(f, "%s." #fl " = %s", sep, v), sep = ", ";
#define EM_F(fl) lit_float(v, sizeof v, rec->fl), fprintf(f, "%s." #fl " = %s", sep, v), sep = ", ";

static int emit_gemm(FILE *f, const RtExec *x, const RtGemm *rec, char *err, size_t nerr) {
  char v[80];
  int bad = 0;
  const char *sep = "";
  fprintf(f, "  {\n    const stepc_gemm g = {");
  RT_GEMM_FIELDS(EM_I, EM_P, EM_F)
  fprintf(f, "};\n    GEMM(g);\n  }\n");
  if (bad) return snprintf(err, nerr, "a GEMM operand points outside the arena and scratch"), -1;
  return 0;
}

static int emit_sdpa(FILE *f, const RtExec *x, const RtSdpa *rec, char *err, size_t nerr) {
  char v[80];
  int bad = 0;
  const char *sep = "";
  fprintf(f, "  {\n    const stepc_sdpa s = {");
  RT_SDPA_FIELDS(EM_I, EM_P, EM_F)
  fprintf(f, "};\n    SDPA(s);\n  }\n");
  if (bad) return snprintf(err, nerr, "a fused attention operand points outside the arena and scratch"), -1;
  return 0;
}
#undef EM_I
#undef EM_P
#undef EM_F

/* ---- the op's comment ---- */

static void tensor_line(FILE *f, const char *tag, const Graph *g, int id) {
  const Tensor *t = &g->t[id];
  fprintf(f, " *   %s %s (", tag, t->name);
  for (int d = 0; d < t->ndim; d++) fprintf(f, "%s%lld", d ? "," : "", (long long)t->shape[d]);
  fprintf(f, ") %s %s @ buffer %d + %lld\n", dtype_name(t->dtype), role_name(t->role), t->buffer, (long long)t->offset);
}

static const char *kind_sym(OpKind k, char *buf, size_t n) {
  size_t i = 0;
  for (const char *c = op_name(k); *c && i + 1 < n; c++) buf[i++] = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
  buf[i] = 0;
  return buf;
}

static void op_comment(FILE *f, const Graph *g, int point, const Op *op) {
  fprintf(f, "/* point %d: %s  %s  [%s, layer %d]\n", point, op_name(op->kind), op->tags.module, phase_name(op->tags.phase),
          op->tags.layer);
  for (int i = 0; i < op->nin; i++) tensor_line(f, "in ", g, op->in[i]);
  for (int i = 0; i < op->nout; i++) tensor_line(f, "out", g, op->out[i]);
  bool any = false;
  for (int i = 0; i < IR_MAX_IATTR; i++) any |= op->a.i[i] != 0;
  for (int i = 0; i < IR_MAX_FATTR; i++) any |= op->a.f[i] != 0;
  if (any) {
    fprintf(f, " *   attrs i {");
    for (int i = 0; i < IR_MAX_IATTR; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)op->a.i[i]);
    fprintf(f, "} f {");
    for (int i = 0; i < IR_MAX_FATTR; i++) fprintf(f, "%s%.9g", i ? ", " : "", op->a.f[i]);
    fprintf(f, "}\n");
  }
  fprintf(f, " */\n");
}

/* ---- the file ---- */

static void emit_prelude(FILE *f) {
  /* runtime/stepc_gen.h, repeated (the artifact build force-includes the header: a drift is an error) */
  fprintf(f, "typedef struct stepc_gen_ctx stepc_gen_ctx;\n"
             "int stepc_gen_op(stepc_gen_ctx *c, int point, int op, int kind);\n"
             "unsigned long long stepc_gen_base(stepc_gen_ctx *c, int which);\n"
             "int stepc_gen_launch(stepc_gen_ctx *c, int kernel, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem,\n"
             "                     void **args);\n"
             "int stepc_gen_gemm(stepc_gen_ctx *c, const void *gemm, unsigned long size);\n"
             "int stepc_gen_sdpa(stepc_gen_ctx *c, const void *sdpa, unsigned long size);\n"
             "int stepc_gen_memset(stepc_gen_ctx *c, unsigned long long dst, unsigned long long bytes);\n"
             "int stepc_gen_copy(stepc_gen_ctx *c, unsigned long long dst, unsigned long long src, unsigned long long bytes);\n"
             "#ifndef STEPC_GEN_H /* force-included: the header's definition is the one this file initialises */\n"
             "typedef struct {\n  int abi;\n  unsigned long long fingerprint;\n  unsigned long long runtime_hash;\n"
             "  unsigned long long layout;\n  int points, micro_points;\n  int (*const *point)(stepc_gen_ctx *c);\n"
             "  int (*micro)(stepc_gen_ctx *c);\n  int (*tail)(stepc_gen_ctx *c);\n  int sm_count;\n  const char *recipe;\n"
             "} stepc_generated;\n#endif\n\n");
  fprintf(f, "/* one cuBLASLt call: runtime/rt.h's RT_GEMM_FIELDS in order. kind 0 NT (C = A B^T), 1 NN, 2 TN;\n"
             " * leading dimensions row-major, in elements; D = alpha op(A) op(B) + beta C (+ bias), D = C where d is 0. */\ntypedef struct {\n");
#define TY_I(fl) fprintf(f, "  long long " #fl ";\n");
#define TY_P(fl) fprintf(f, "  unsigned long long " #fl ";\n");
#define TY_F(fl) fprintf(f, "  float " #fl ";\n");
  RT_GEMM_FIELDS(TY_I, TY_P, TY_F)
  fprintf(f, "} stepc_gemm;\n\n");
  fprintf(f, "/* one cuDNN fused attention call: runtime/rt.h's RT_SDPA_FIELDS in order */\ntypedef struct {\n");
  RT_SDPA_FIELDS(TY_I, TY_P, TY_F)
#undef TY_I
#undef TY_P
#undef TY_F
  fprintf(f, "} stepc_sdpa;\n\n");
  fprintf(f, "/* on the CPU reference device OP() runs the op on the host and the function returns before its launches */\n"
             "#define OP(point, op, kind)                     \\\n"
             "  do {                                          \\\n"
             "    int r_ = stepc_gen_op(c, point, op, kind);  \\\n"
             "    if (r_) return r_ < 0 ? -1 : 0;             \\\n"
             "  } while (0)\n"
             "#define LAUNCH(k, gx, gy, gz, block, smem, v) \\\n"
             "  if (stepc_gen_launch(c, KN_##k, gx, gy, gz, block, smem, v)) return -1\n"
             "#define GEMM(g) \\\n  if (stepc_gen_gemm(c, &(g), sizeof(g))) return -1\n"
             "#define SDPA(s) \\\n  if (stepc_gen_sdpa(c, &(s), sizeof(s))) return -1\n"
             "#define MEMSET(p, bytes) \\\n  if (stepc_gen_memset(c, p, bytes)) return -1\n"
             "#define COPY(dst, src, bytes) \\\n  if (stepc_gen_copy(c, dst, src, bytes)) return -1\n\n");
}

/* s made safe inside a C block comment: a path with a star before a slash would close it (step.c then did
 * not compile), a control character would break the line. */
static void comment_safe(char *dst, size_t n, const char *s) {
  size_t k = 0;
  for (; *s && k + 2 < n; s++) {
    dst[k++] = (unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s;
    if (s[0] == '*' && s[1] == '/') dst[k++] = ' ';
  }
  dst[k] = 0;
}

/* s as the body of a C string literal (quotes, backslashes and control characters escaped). */
static void put_c_string(FILE *f, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20 || c == 0x7f) fprintf(f, "\\%03o", c);
    else fputc(c, f);
  }
}

int step_emit_c(const Plan *p, const char *recipe, int sm_count, FILE *f, StepEmitStats *st, char *why, size_t nwhy,
                char *err, size_t nerr) {
  const Graph *g = p->g;
  const Schedule *sc = &p->sc;
  memset(st, 0, sizeof *st);
  why[0] = 0;
  RtDevice d;
  RtRecorder rec;
  rt_record_open(&d, &rec, sm_count);
  RtGenKernels gk; /* the plan's generated kernels: their handles follow kernel_list.h's */
  ew_kernels_rt(&p->ew, &gk);
  d.gen = &gk;
  int unsupported = 0;
  RtExec *x = rt_exec_new(&d, g, &unsupported);
  if (!x && !unsupported) {
    snprintf(err, nerr, "recording the step: %s", d.err);
    return -1;
  }
  if (!x) snprintf(why, nwhy, "%s", d.err);
  st->cuda = x != NULL;
  /* record every scheduled op: first[i] .. first[i+1] are point i's records */
  int rc = -1;
  int *first = calloc((size_t)sc->nops + 2, sizeof *first), *op_at = calloc((size_t)sc->nops + 1, sizeof *op_at);
  if (!first || !op_at) {
    snprintf(err, nerr, "out of memory");
    goto done;
  }
  int npt = 0, micro_points = 0;
  for (int i = 0; i < sc->n; i++) {
    if (i == sc->micro_end) micro_points = npt;
    if (sc->it[i].kind != SCHED_OP) continue;
    int o = sc->it[i].id;
    first[npt] = rec.n;
    op_at[npt++] = o;
    if (x) {
      rec.on = 1, rec.op = o;
      if (rt_exec_run_op(x, o)) {
        snprintf(err, nerr, "recording op %d: %s", o, d.err);
        goto done;
      }
      rec.on = 0;
    }
  }
  if (sc->micro_end >= sc->n) micro_points = npt;
  first[npt] = rec.n;
  for (int i = 0; i < rec.n; i++) {
    const RtRec *r = &rec.r[i];
    st->launches += r->kind == RT_REC_LAUNCH, st->gemms += r->kind == RT_REC_GEMM, st->sdpas += r->kind == RT_REC_SDPA;
    st->memsets += r->kind == RT_REC_MEMSET, st->copies += r->kind == RT_REC_COPY;
    if (r->kind == RT_REC_LAUNCH) st->kernel_used[r->k] = 1;
  }
  char safe_recipe[4200], safe_why[1100];
  comment_safe(safe_recipe, sizeof safe_recipe, recipe);
  /* the generated kernels: their names for the cubin check; kernels.cu with their text */
  st->ngen = gk.n;
  for (int k = 0; k < st->ngen; k++) snprintf(st->gen_name[k], sizeof st->gen_name[k], "%s", gk.k[k].name);
  if (!(st->kernels_cu = ew_kernels_cu(&p->ew, err, nerr))) goto done;

  fprintf(f,
          "/* step.c — the planned training step of %s, generated by `stepc build`. Do not edit.\n"
          " *\n"
          " * One function per scheduled op, in plan order (POINT[] below): the micro-batch program (forward,\n"
          " * backward with recompute replays; main gradients accumulate) runs once per micro-batch, the tail\n"
          " * (global norm, clipping, AdamW, zeroing) once per step. Each function holds its op's CUDA work as\n"
          " * literals, recorded from the executor's launch lowering (runtime/cuda/op_*.c) for a GPU of %d SMs:\n"
          " * LAUNCH(kernel, grid x, y, z, block, dynamic shared bytes, args), GEMM (one cuBLASLt call), SDPA (one\n"
          " * cuDNN fused attention call), MEMSET,\n"
          " * COPY. A is the plan's arena, S the executor's scratch (runtime/stepc_gen.h).\n"
          " * %d ops (%d per micro-batch x %d micro-batches, %d in the tail): %d kernel launches, %d GEMMs,\n"
          " * %d memsets, %d copies per micro-batch program + tail; arena %lld bytes, peak live %lld bytes;\n"
          " * %d recompute replay ops per micro-batch. */\n\n",
          safe_recipe, sm_count, npt, micro_points, g->num_microbatches, npt - micro_points, st->launches, st->gemms, st->memsets,
          st->copies, (long long)(x ? rt_exec_arena_bytes(x) : p->mp.arena), (long long)p->mp.peak, p->rr.nreplay_total);
  comment_safe(safe_why, sizeof safe_why, why);
  if (!x) fprintf(f, "/* The CUDA backend does not run this step (%s): the functions below hold no CUDA work; the CPU\n * reference device runs it. */\n\n", safe_why);
  emit_prelude(f);
  fprintf(f, "/* op kinds (ir/ops/op_list.h) */\nenum {\n");
  bool used[OP_COUNT] = {false};
  for (int o = 0; o < g->nop; o++) used[g->op[o].kind] = true;
  char sym[64];
  for (int k = 0; k < OP_COUNT; k++)
    if (used[k]) fprintf(f, "  K_%s = %d,\n", kind_sym((OpKind)k, sym, sizeof sym), k);
  fprintf(f, "};\n\n/* kernels (kernels/kernel_list.h order, then the generated ones: kernels.cu's tail) */\nenum {\n");
  for (int k = 0; k < RT_K_COUNT + st->ngen; k++)
    if (st->kernel_used[k]) fprintf(f, "  KN_%s = %d, /* (%s) */\n", rt_kname(&d, k), k, rt_ksig(&d, k));
  fprintf(f, "  KN_NONE = -1\n};\n\n");
  rc = 0;
  for (int q = 0; q < npt && rc == 0; q++) {
    const Op *op = &g->op[op_at[q]];
    op_comment(f, g, q, op);
    fprintf(f, "static int p%d(stepc_gen_ctx *c) {\n  OP(%d, %d, K_%s);\n", q, q, op_at[q], kind_sym(op->kind, sym, sizeof sym));
    if (first[q] == first[q + 1]) {
      fprintf(f, x ? "  /* no CUDA work of its own: fused into a neighbour */\n  return 0;\n}\n\n" : "  return 0;\n}\n\n");
      continue;
    }
    fprintf(f, "  const unsigned long long A = stepc_gen_base(c, 0), S = stepc_gen_base(c, 1);\n  (void)A, (void)S;\n");
    char v[80], w[80];
    for (int i = first[q]; i < first[q + 1] && rc == 0; i++) {
      const RtRec *r = &rec.r[i];
      switch (r->kind) {
      case RT_REC_LAUNCH: rc = emit_launch(f, x, r, err, nerr); break;
      case RT_REC_GEMM: rc = emit_gemm(f, x, &r->gemm, err, nerr); break;
      case RT_REC_SDPA: rc = emit_sdpa(f, x, &r->sdpa, err, nerr); break;
      case RT_REC_MEMSET:
        rc = lit_ptr(v, sizeof v, x, r->dst);
        fprintf(f, "  MEMSET(%s, %lluULL);\n", v, (unsigned long long)r->bytes);
        break;
      case RT_REC_COPY:
        rc = lit_ptr(v, sizeof v, x, r->dst) | lit_ptr(w, sizeof w, x, r->src);
        fprintf(f, "  COPY(%s, %s, %lluULL);\n", v, w, (unsigned long long)r->bytes);
        break;
      }
      if (rc && !err[0]) snprintf(err, nerr, "op %d: a memset or copy outside the arena and scratch", op_at[q]);
    }
    fprintf(f, "  return 0;\n}\n\n");
  }
  if (rc == 0) {
    fprintf(f, "static int (*const POINT[])(stepc_gen_ctx *c) = {");
    int q = 0;
    for (int i = 0; i < sc->n; i++) {
      if (i == sc->micro_end) fprintf(f, "\n    /* the tail */");
      if (sc->it[i].kind != SCHED_OP) {
        const Bucket *b = &sc->b[sc->it[i].id];
        int fq = -1;
        for (int k = 0; k < npt; k++) fq = op_at[k] == b->fire_op ? k : fq;
        fprintf(f, "\n    /* gradient bucket %d complete (the CPU device reduces it here, on the last micro-batch; on cuda the\n"
                   "       runtime enqueues its collective on the communication stream after p%d, the launch that last\n"
                   "       writes its gradients) */", sc->it[i].id, fq);
      }
      else fprintf(f, "%sp%d,", q % 12 == 0 ? "\n    " : " ", q), q++;
    }
    fprintf(f, "\n};\n\n"
               "static int micro(stepc_gen_ctx *c) {\n  for (int i = 0; i < %d; i++)\n    if (POINT[i](c)) return -1;\n  return 0;\n}\n\n"
               "static int tail(stepc_gen_ctx *c) {\n  for (int i = %d; i < %d; i++)\n    if (POINT[i](c)) return -1;\n  return 0;\n}\n\n",
            micro_points, micro_points, npt);
    fprintf(f, "const stepc_generated stepc_generated_step = {%d, 0x%016llxULL, 0x%016llxULL, 0x%016llxULL, %d, %d, POINT, micro, tail, %d, \"",
            STEPC_GEN_ABI, (unsigned long long)step_fingerprint(g), (unsigned long long)rt_kernel_list_hash(d.gen),
            (unsigned long long)(x ? rt_exec_layout_hash(x) : 0), npt, micro_points, sm_count);
    put_c_string(f, recipe);
    fprintf(f, "\"};\n");
    if (ferror(f)) rc = -1, snprintf(err, nerr, "write error");
  }
done:
  if (rc) free(st->kernels_cu), st->kernels_cu = NULL;
  free(first), free(op_at);
  rt_exec_free(x);
  rt_recorder_free(&rec);
  return rc ? -1 : 0;
}
