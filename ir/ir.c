/* ir.c — graph building, tags, queries and the trivial memory plan. */
#include "ir.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const DTYPE_NAMES[DT_COUNT] = {"fp32",  "bf16",  "fp16",   "fp64",  "int32",
                                                  "int64", "uint8", "f8e4m3", "f8e5m2"};
static const size_t DTYPE_SIZES[DT_COUNT] = {4, 2, 2, 8, 4, 8, 1, 1, 1};
static const char *const ROLE_NAMES[ROLE_COUNT] = {"param",      "master",   "grad",      "optim",    "input",
                                                   "activation", "act_grad", "workspace", "param_fp8"};
static const char *const PHASE_NAMES[IR_PHASE_COUNT] = {"forward", "backward", "replay", "reduce",
                                                        "optimizer"};
/* Same order as SPEC_LABELS and the IR_LABEL_* bits. */
static const char *const LABEL_NAMES[IR_NLABELS] = {"core_attn",      "moe_act",      "layernorm",
                                                    "mla_up_proj",    "mlp",          "moe",
                                                    "shared_experts", "gdn_norm_out", "mlp_act"};
static const char *const SCOPE_NAMES[IR_NSCOPES] = {"layer",      "attn",           "mlp",  "moe",
                                                    "moe_router", "moe_preprocess", "mamba"};

size_t dtype_size(DType d) { return d < DT_COUNT ? DTYPE_SIZES[d] : 0; }
bool dtype_is_float(DType d) {
  return d == DT_F32 || d == DT_BF16 || d == DT_F16 || d == DT_F64 || d == DT_F8E4M3 || d == DT_F8E5M2;
}
const char *dtype_name(DType d) { return d < DT_COUNT ? DTYPE_NAMES[d] : "?"; }
const char *role_name(TensorRole r) { return r < ROLE_COUNT ? ROLE_NAMES[r] : "?"; }
bool role_is_persistent(TensorRole r) {
  return r == ROLE_PARAM || r == ROLE_MASTER || r == ROLE_GRAD || r == ROLE_OPTIM || r == ROLE_PARAM_FP8;
}
const char *phase_name(Phase p) { return p < IR_PHASE_COUNT ? PHASE_NAMES[p] : "?"; }
const char *ir_label_name(int i) { return i >= 0 && i < IR_NLABELS ? LABEL_NAMES[i] : "?"; }
const char *ir_scope_name(int i) { return i >= 0 && i < IR_NSCOPES ? SCOPE_NAMES[i] : "?"; }

uint32_t ir_label_from_name(const char *s) {
  for (int i = 0; i < IR_NLABELS; i++)
    if (strcmp(s, LABEL_NAMES[i]) == 0) return 1u << i;
  return 0;
}
uint32_t ir_scope_from_name(const char *s) {
  for (int i = 0; i < IR_NSCOPES; i++)
    if (strcmp(s, SCOPE_NAMES[i]) == 0) return 1u << i;
  return 0;
}

int64_t tensor_numel(const Tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++)
    n *= t->shape[d];
  return n;
}

int tensor_tp_rep(const Tensor *t, int k) {
  return k >= 0 && k < IR_TP_MAX_SEGS && t->tp_rep[k] > 1 ? t->tp_rep[k] : 1;
}

int64_t tensor_tp_part(const Tensor *t, int k) {
  return t->tp_size > 0 ? t->tp_seg[k] * tensor_tp_rep(t, k) / t->tp_size : t->tp_seg[k];
}

bool graph_expert_state(const Graph *g, int t) {
  for (int hop = 0; hop < 4 && t >= 0 && t < g->nt; hop++) {
    if (g->t[t].tp_ep) return true;
    t = g->t[t].of;
  }
  return false;
}

bool graph_fp8_master(const Graph *g, int t) {
  if (t < 0 || t >= g->nt || g->t[t].role != ROLE_PARAM || g->t[t].dtype != DT_F32) return false;
  for (int u = 0; u < g->nt; u++)
    if (g->t[u].role == ROLE_PARAM_FP8 && g->t[u].of == t) return true;
  return false;
}

void tensor_tp_full_shape(const Tensor *t, int64_t full[IR_MAX_DIMS]) {
  for (int d = 0; d < IR_MAX_DIMS; d++)
    full[d] = t->shape[d];
  if (t->tp_nseg <= 0) return;
  int64_t rows = 0; /* the segments tile the one-rank dim (runtime/image_check.c checks it) */
  for (int k = 0; k < t->tp_nseg && k < IR_TP_MAX_SEGS; k++)
    rows += t->tp_seg[k];
  full[t->tp_dim] = rows;
}

int64_t tensor_tp_full_index(const Tensor *t, int rank, int64_t j) {
  if (t->tp_nseg <= 0) return j;
  int64_t full[IR_MAX_DIMS], idx[IR_MAX_DIMS] = {0};
  tensor_tp_full_shape(t, full);
  for (int d = t->ndim - 1; d >= 0; d--) /* j's coordinates in the shard */
    idx[d] = j % t->shape[d], j /= t->shape[d];
  int64_t x = idx[t->tp_dim], base = 0; /* the segment x falls in, and its place in the full dim */
  for (int k = 0; k < t->tp_nseg; k++) {
    int64_t part = tensor_tp_part(t, k);
    if (x < part || k == t->tp_nseg - 1) {
      idx[t->tp_dim] = base + (int64_t)(rank / tensor_tp_rep(t, k)) * part + x;
      break;
    }
    x -= part, base += t->tp_seg[k];
  }
  int64_t f = 0;
  for (int d = 0; d < t->ndim; d++)
    f = f * full[d] + idx[d];
  return f;
}

uint64_t ir_fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

size_t text_utf8_len(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  if (p[0] < 0x80) return 1;
  /* RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF */
  unsigned char lo = 0x80, hi = 0xbf;
  size_t n;
  if (p[0] >= 0xc2 && p[0] <= 0xdf)
    n = 2;
  else if (p[0] >= 0xe0 && p[0] <= 0xef)
    n = 3, lo = p[0] == 0xe0 ? 0xa0 : 0x80, hi = p[0] == 0xed ? 0x9f : 0xbf;
  else if (p[0] >= 0xf0 && p[0] <= 0xf4)
    n = 4, lo = p[0] == 0xf0 ? 0x90 : 0x80, hi = p[0] == 0xf4 ? 0x8f : 0xbf;
  else
    return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (p[i] < 0x80 || p[i] > 0xbf) return 0;
  return n;
}

/* Recipe strings and file names may hold any bytes; a byte that is not part of valid UTF-8 is
 * written as U+FFFD, so that the output stays JSON that every parser accepts. */
void json_write_string(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p;) {
    size_t n = text_utf8_len((const char *)p);
    switch (*p) {
    case '"': fputs("\\\"", out); break;
    case '\\': fputs("\\\\", out); break;
    case '\n': fputs("\\n", out); break;
    case '\t': fputs("\\t", out); break;
    case '\r': fputs("\\r", out); break;
    default:
      if (n == 0)
        fputs("\\ufffd", out);
      else if (*p < 0x20 || *p == 0x7f)
        fprintf(out, "\\u%04x", *p);
      else
        fwrite(p, 1, n, out);
    }
    p += n ? n : 1;
  }
  fputc('"', out);
}

Graph *graph_new(void) {
  Graph *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->cur.layer = -1;
  g->cur.fwd = -1;
  g->tokens = g->targets = g->loss = g->grad_norm = g->lr = -1;
  g->num_microbatches = 1;
  return g;
}

void graph_free(Graph *g) {
  if (!g) return;
  free(g->t);
  free(g->op);
  free(g);
}

int graph_fail(Graph *g, const char *fmt, ...) {
  if (g->err[0]) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->err, sizeof g->err, fmt, ap);
  va_end(ap);
  return -1;
}

void graph_set_phase(Graph *g, Phase p) { g->cur.phase = p; }
void graph_set_layer(Graph *g, int layer) { g->cur.layer = layer; }
void graph_set_labels(Graph *g, uint32_t labels) { g->cur.labels = labels; }
void graph_set_scopes(Graph *g, uint32_t scopes) { g->cur.scopes = scopes; }
void graph_module(Graph *g, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->cur.module, sizeof g->cur.module, fmt, ap);
  va_end(ap);
}

static int tensor_add(Graph *g, const char *name, DType dt, TensorRole role, int ndim, const int64_t *shape) {
  if (ndim < 0 || ndim > IR_MAX_DIMS)
    return graph_fail(g, "tensor %s: %d dims (max %d)", name, ndim, IR_MAX_DIMS);
  if (g->nt >= IR_MAX_TENSORS) return graph_fail(g, "more than %d tensors (STEPC-32)", IR_MAX_TENSORS);
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] <= 0) return graph_fail(g, "tensor %s: dim %d is %lld", name, d, (long long)shape[d]);
    /* the validator bounds every tensor the recipe's sizes make; this catches any it missed */
    if (__builtin_mul_overflow(numel, shape[d], &numel) || numel > IR_MAX_NUMEL)
      return graph_fail(g, "tensor %s has more than 2^40 elements (STEPC-32)", name);
  }
  if (g->nt == g->capt) {
    int cap = g->capt ? 2 * g->capt : 256;
    Tensor *t = realloc(g->t, (size_t)cap * sizeof *t);
    if (!t) return graph_fail(g, "out of memory");
    g->t = t;
    g->capt = cap;
  }
  Tensor *t = &g->t[g->nt];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->dtype = dt;
  t->role = role;
  t->ndim = ndim;
  for (int d = 0; d < IR_MAX_DIMS; d++)
    t->shape[d] = d < ndim ? shape[d] : 1;
  t->producer = -1;
  t->of = -1;
  t->buffer = -1;
  return g->nt++;
}

int graph_tensor(Graph *g, const char *name, DType dt, TensorRole role, int ndim, const int64_t *shape) {
  return tensor_add(g, name, dt, role, ndim, shape);
}

int graph_param(Graph *g, const char *name, DType dt, int ndim, const int64_t *shape, IrInit init,
                double std) {
  int id = tensor_add(g, name, dt, ROLE_PARAM, ndim, shape);
  if (id < 0) return -1;
  g->t[id].init = init;
  g->t[id].init_std = std;
  return id;
}

static int op_push(Graph *g, OpKind kind, const int *in, int nin, const OpAttrs *a) {
  if (kind < 0 || kind >= OP_COUNT) return graph_fail(g, "op kind %d out of range", (int)kind);
  const OpInfo *info = op_info(kind);
  if (nin < info->nin_min || nin > info->nin_max || nin > IR_MAX_IN)
    return graph_fail(g, "%s in %s: %d inputs (expects %d..%d)", info->name, g->cur.module, nin,
                      info->nin_min, info->nin_max);
  for (int i = 0; i < nin; i++)
    if (in[i] < 0 || in[i] >= g->nt)
      return graph_fail(g, "%s in %s: input %d is not a tensor (%d)", info->name, g->cur.module, i, in[i]);
  if (g->nop == g->capop) {
    int cap = g->capop ? 2 * g->capop : 256;
    Op *o = realloc(g->op, (size_t)cap * sizeof *o);
    if (!o) return graph_fail(g, "out of memory");
    g->op = o;
    g->capop = cap;
  }
  Op *op = &g->op[g->nop];
  memset(op, 0, sizeof *op);
  op->kind = kind;
  op->nin = nin;
  if (nin > 0) memcpy(op->in, in, (size_t)nin * sizeof *in);
  if (a) op->a = *a;
  op->tags = g->cur;
  return g->nop++;
}

int graph_op(Graph *g, OpKind kind, const int *in, int nin, const OpAttrs *a, int *out,
             const char *const *names) {
  if (g->err[0]) return -1;
  int id = op_push(g, kind, in, nin, a);
  if (id < 0) return -1;
  const OpInfo *info = op_info(kind);
  OpOut o[IR_MAX_OUT];
  memset(o, 0, sizeof o);
  char err[200] = "";
  if (info->infer(g, &g->op[id], o, err, sizeof err) != 0) {
    g->nop--;
    return graph_fail(g, "%s in %s: %s", info->name, g->cur.module, err);
  }
  for (int i = 0; i < info->nout; i++) {
    char name[IR_NAME_MAX];
    if (names && names[i])
      snprintf(name, sizeof name, "%s", names[i]);
    else
      snprintf(name, sizeof name, "%s.%s", g->cur.module, o[i].suffix ? o[i].suffix : "out");
    int t = tensor_add(g, name, o[i].dtype, o[i].role, o[i].ndim, o[i].shape);
    if (t < 0) return -1;
    g->t[t].producer = id;
    g->op[id].out[i] = t;
    if (out) out[i] = t;
  }
  g->op[id].nout = info->nout;
  return id;
}

int graph_op1(Graph *g, OpKind kind, const int *in, int nin, const OpAttrs *a, const char *name) {
  int out[IR_MAX_OUT];
  const char *names[IR_MAX_OUT] = {name};
  if (graph_op(g, kind, in, nin, a, out, names) < 0) return -1;
  return out[0];
}

int graph_op_into(Graph *g, OpKind kind, const int *in, int nin, const int *out, int nout, const OpAttrs *a) {
  if (g->err[0]) return -1;
  if (nout > IR_MAX_OUT) return graph_fail(g, "%s: %d outputs", op_name(kind), nout);
  for (int i = 0; i < nout; i++)
    if (out[i] < 0 || out[i] >= g->nt)
      return graph_fail(g, "%s: output %d is not a tensor", op_name(kind), i);
  int id = op_push(g, kind, in, nin, a);
  if (id < 0) return -1;
  g->op[id].nout = nout;
  memcpy(g->op[id].out, out, (size_t)nout * sizeof *out);
  for (int i = 0; i < nout; i++)
    if (g->t[out[i]].producer < 0 && !role_is_persistent(g->t[out[i]].role)) g->t[out[i]].producer = id;
  return id;
}

int graph_find_tensor(const Graph *g, const char *name) {
  for (int i = 0; i < g->nt; i++)
    if (strcmp(g->t[i].name, name) == 0) return i;
  return -1;
}

int graph_find_op(const Graph *g, OpKind kind, const char *module, Phase phase) {
  for (int i = 0; i < g->nop; i++)
    if (g->op[i].kind == kind && g->op[i].tags.phase == phase && strcmp(g->op[i].tags.module, module) == 0)
      return i;
  return -1;
}

int graph_lm_loss_op(const Graph *g) {
  int found = -1;
  for (int i = 0; i < g->nop; i++) {
    const Op *op = &g->op[i];
    if ((op->kind != OP_CROSS_ENTROPY && op->kind != OP_LINEAR_CROSS_ENTROPY) ||
        op->tags.phase != IR_PHASE_FORWARD)
      continue;
    if (found >= 0) return -1;
    found = i;
  }
  return found;
}

static void bits_str(uint32_t bits, const char *const *names, int n, char *buf, size_t cap) {
  size_t len = (size_t)snprintf(buf, cap, "{");
  bool first = true;
  for (int i = 0; i < n && len < cap; i++)
    if (bits & (1u << i)) {
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", first ? "" : ",", names[i]);
      first = false;
    }
  if (len < cap) snprintf(buf + len, cap - len, "}");
}
void ir_labels_str(uint32_t labels, char *buf, size_t n) {
  bits_str(labels, LABEL_NAMES, IR_NLABELS, buf, n);
}
void ir_scopes_str(uint32_t scopes, char *buf, size_t n) {
  bits_str(scopes, SCOPE_NAMES, IR_NSCOPES, buf, n);
}

void graph_dump(const Graph *g, void *FILE_out) {
  FILE *f = FILE_out;
  for (int i = 0; i < g->nop; i++) {
    const Op *op = &g->op[i];
    char lab[128], sc[128];
    ir_labels_str(op->tags.labels, lab, sizeof lab);
    ir_scopes_str(op->tags.scopes, sc, sizeof sc);
    fprintf(f, "%4d %-16s %-9s L%-3d %-44s %s %s (", i, op_name(op->kind), phase_name(op->tags.phase),
            op->tags.layer, op->tags.module, lab, sc);
    for (int j = 0; j < op->nin; j++)
      fprintf(f, "%s%s", j ? ", " : "", g->t[op->in[j]].name);
    fprintf(f, ") -> (");
    for (int j = 0; j < op->nout; j++) {
      const Tensor *t = &g->t[op->out[j]];
      fprintf(f, "%s%s [", j ? ", " : "", t->name);
      for (int d = 0; d < t->ndim; d++)
        fprintf(f, "%s%lld", d ? "," : "", (long long)t->shape[d]);
      fprintf(f, "]");
    }
    fprintf(f, ")\n");
  }
}

double op_bytes(const Graph *g, const Op *op) {
  const OpInfo *info = op_info(op->kind);
  return info->bytes ? info->bytes(g, op) : op_tensor_bytes(g, op);
}

double op_tensor_bytes(const Graph *g, const Op *op) {
  double b = 0;
  for (int i = 0; i < op->nin; i++)
    b += (double)tensor_numel(&g->t[op->in[i]]) * (double)dtype_size(g->t[op->in[i]].dtype);
  for (int i = 0; i < op->nout; i++)
    b += (double)tensor_numel(&g->t[op->out[i]]) * (double)dtype_size(g->t[op->out[i]].dtype);
  return b;
}

double op_flops(const Graph *g, const Op *op) {
  const OpInfo *info = op_info(op->kind);
  return info->flops ? info->flops(g, op) : 0.0;
}

int64_t graph_plan_trivial(Graph *g, int float_bytes) {
  int64_t off = 0;
  for (int i = 0; i < g->nt; i++) {
    Tensor *t = &g->t[i];
    size_t es = dtype_is_float(t->dtype) && float_bytes > 0 ? (size_t)float_bytes : dtype_size(t->dtype);
    t->buffer = 0;
    t->offset = off;
    t->bytes = tensor_numel(t) * (int64_t)es;
    off += (t->bytes + 63) / 64 * 64;
  }
  g->nbuffers = 1;
  g->buffer_bytes[0] = off;
  return off;
}
