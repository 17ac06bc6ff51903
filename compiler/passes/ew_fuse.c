/* ew_fuse.c — chains of pointwise ops and their generated kernels (ew_fuse.h). */
#include "passes/ew_fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cubin/cubin.h"
#include "codegen/cubin/kernel_text.h"
#include "codegen/cubin/textbuf.h"

/* An op's row in a chain: its OpInfo's ew fact (ir.h), the one place its device expression lives;
 * NULL when it never joins a chain. */
typedef OpEw EwOp;

static const EwOp *row(OpKind k) {
  const OpEw *e = op_info(k)->facts.ew;
  return e && e->expr ? e : NULL;
}
int ew_pointwise(OpKind k) { return row(k) != NULL; }

static int same_shape(const Tensor *a, const Tensor *b) {
  return a->dtype == b->dtype && a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof a->shape);
}

/* Whether op o could be a chain member over tensors shaped like `like` (structure only). */
static int member(const Graph *g, int o, const uint8_t *blocked, const Tensor *like) {
  const Op *op = &g->op[o];
  const EwOp *r = row(op->kind);
  if (!r || blocked[o] || op->nout != 1 || op->nin < r->nval) return 0;
  if (op->kind == OP_DROPOUT_BWD && op->a.i[1]) return 0; /* a TP slice's mask: its own launch (op_basic.c) */
  const Tensor *y = &g->t[op->out[0]];
  if (y->dtype != DT_BF16 || (like && !same_shape(y, like))) return 0;
  for (int i = 0; i < op->nin; i++) {
    if (op->in[i] == op->out[0]) return 0;
    if (i < r->nval && !same_shape(&g->t[op->in[i]], y)) return 0;
  }
  return 1;
}

int ew_chain_at(const Graph *g, int first, const int *uses, const uint8_t *blocked, const uint8_t *passable,
                EwChain *c) {
  memset(c, 0, sizeof *c);
  c->kernel = -1;
  if (first < 0 || first >= g->nop || !member(g, first, blocked, NULL)) return 0;
  const Op *f = &g->op[first];
  const Tensor *like = &g->t[f->out[0]];
  c->first = first;
  int n = 0;
  for (int o = first; o < g->nop && n < EW_MAX_CHAIN; o++) {
    const Op *op = &g->op[o];
    /* one phase; layer and graph scopes may differ (as for ADD -> norm: the chain writes the bits
     * its ops would, so under scoped graphs it runs in its last op's segment and the first op's
     * segment launches one kernel less; every reader of what it writes comes after its last op) */
    if (op->tags.phase != f->tags.phase) break;
    if (o > first && passable && passable[o] && !member(g, o, blocked, like)) {
      /* launches nothing: it may lie between two ops of the chain if it touches none of its tensors */
      int touch = 0;
      for (int j = 0; j < n; j++) {
        const Op *m = &g->op[c->op[j]];
        for (int a = 0; a < op->nin + op->nout; a++) {
          int t = a < op->nin ? op->in[a] : op->out[a - op->nin];
          touch |= t == m->out[0];
          for (int i = 0; i < m->nin; i++)
            touch |= t == m->in[i];
        }
      }
      if (touch) break;
      continue;
    }
    if (o > first) {
      if (!member(g, o, blocked, like)) break;
      int linked = 0;
      for (int i = 0; i < row(op->kind)->nval; i++)
        for (int j = 0; j < n; j++)
          linked |= op->in[i] == g->op[c->op[j]].out[0];
      if (!linked) break;
    }
    /* its external inputs (neither a chain op's value nor an input already) must fit */
    int fresh[EW_MAX_IO], nf = 0;
    for (int i = 0; i < row(op->kind)->nval && nf >= 0; i++) {
      int t = op->in[i], known = 0;
      for (int j = 0; j < n; j++)
        known |= t == g->op[c->op[j]].out[0];
      for (int k = 0; k < c->nin; k++)
        known |= c->in[k] == t;
      for (int k = 0; k < nf; k++)
        known |= fresh[k] == t;
      if (!known) nf = c->nin + nf < EW_MAX_IO ? (fresh[nf] = t, nf + 1) : -1;
    }
    if (nf < 0) break;
    for (int k = 0; k < nf; k++)
      c->in[c->nin++] = fresh[k];
    c->op[n++] = o;
  }
  if (n < 2) return 0;
  c->nops = n;
  for (int j = 0; j < n; j++)
    snprintf(c->scalars[j], sizeof c->scalars[j], "%s", row(g->op[c->op[j]].kind)->scalars);
  /* an intermediate output is dropped only when the chain's ops are its sole readers */
  for (int j = 0; j < n; j++) {
    int t = g->op[c->op[j]].out[0], inside = 0;
    for (int k = j + 1; k < n; k++) {
      const Op *op = &g->op[c->op[k]];
      for (int i = 0; i < op->nin; i++)
        inside += op->in[i] == t;
    }
    const Tensor *tt = &g->t[t];
    c->store[j] = j == n - 1 || uses[t] != inside || t == g->loss || t == g->grad_norm || t == g->lr ||
                  (tt->role != ROLE_ACT && tt->role != ROLE_ACT_GRAD);
  }
  return 1;
}

/* ---- kernels ---- */

/* s with '#' -> j and $i -> the operand names in ops[i] */
static void subst(TextBuf *b, const char *s, int j, char ops[][8]) {
  for (; *s; s++) {
    if (*s == '#')
      textbuf_printf(b, "%d", j);
    else if (*s == '$' && s[1] >= '0' && s[1] <= '9')
      textbuf_puts(b, ops[*++s - '0']);
    else
      textbuf_put(b, s, 1);
  }
}

/* operand i of chain op j: "x<m>" (external input m) or "v<k>" (chain op k's value) */
static void operand(const Graph *g, const EwChain *c, int j, int i, char *out) {
  int t = g->op[c->op[j]].in[i];
  for (int k = 0; k < j; k++)
    if (g->op[c->op[k]].out[0] == t) {
      snprintf(out, 8, "v%d", k);
      return;
    }
  for (int m = 0; m < c->nin; m++)
    if (c->in[m] == t) snprintf(out, 8, "x%d", m);
}

static const struct kernel_file *template_text(void) {
  for (int i = 0; i < template_files_count; i++)
    if (strcmp(template_files[i].name, "elementwise.cu.in") == 0) return &template_files[i];
  return NULL;
}

/* The template with @NAME@ etc. replaced. */
static char *fill(const char *tpl, const char *const keys[], char *const vals[], int nk) {
  TextBuf b = {0};
  for (const char *s = tpl; *s;) {
    int hit = 0;
    for (int k = 0; k < nk && !hit; k++) {
      size_t n = strlen(keys[k]);
      if (!strncmp(s, keys[k], n)) textbuf_puts(&b, vals[k]), s += n, hit = 1;
    }
    if (!hit) textbuf_put(&b, s++, 1);
  }
  return textbuf_take(&b);
}

int ew_kernel_add(EwKernels *ks, const Graph *g, EwChain *c) {
  char key[256] = "", opnd[EW_MAX_IO][8];
  size_t kl = 0;
  for (int j = 0; j < c->nops; j++) {
    const Op *op = &g->op[c->op[j]];
    kl += (size_t)snprintf(key + kl, sizeof key - kl, "%s%s(", j ? ">" : "", op_name(op->kind));
    for (int i = 0; i < row(op->kind)->nval && kl < sizeof key; i++) {
      operand(g, c, j, i, opnd[i]);
      kl += (size_t)snprintf(key + kl, sizeof key - kl, "%s%s", i ? "," : "", opnd[i]);
    }
    if (kl < sizeof key) kl += (size_t)snprintf(key + kl, sizeof key - kl, ")%s", c->store[j] ? "!" : "");
    if (kl >= sizeof key) return -1;
  }
  for (int k = 0; k < ks->n; k++)
    if (!strcmp(ks->k[k].key, key)) return c->kernel = k;
  if (ks->n == EW_MAX_KERNELS || ks->n == RT_GEN_MAX) return -1;
  const struct kernel_file *tpl = template_text();
  if (!tpl) return -1;
  EwKernel *K = &ks->k[ks->n];
  memset(K, 0, sizeof *K);
  snprintf(K->key, sizeof K->key, "%s", key);
  size_t nl = (size_t)snprintf(K->name, sizeof K->name, "ew");
  for (int j = 0; j < c->nops; j++)
    nl += (size_t)snprintf(K->name + nl, sizeof K->name - nl, "_%s", op_name(g->op[c->op[j]].kind));
  snprintf(K->name + nl, sizeof K->name - nl, "_%08x",
           (unsigned)(cubin_fnv1a(CUBIN_FNV_OFFSET, key, strlen(key)) & 0xffffffffu));
  TextBuf params = {0}, setup = {0}, group = {0}, loads = {0}, body = {0}, stores = {0};
  int sl = 0;
  const char *sep = "";
  for (int j = 0; j < c->nops; j++)
    if (c->store[j]) textbuf_printf(&params, "%sbf16* out%d", sep, j), sep = ", ", K->sig[sl++] = 'p';
  for (int m = 0; m < c->nin; m++) {
    textbuf_printf(&params, "%sconst bf16* in%d", sep, m), sep = ", ", K->sig[sl++] = 'p';
    textbuf_printf(&loads, "      const float x%d = bf16_to_f32(in%d[i]);\n", m, m);
  }
  textbuf_printf(&params, "%slong n", sep), K->sig[sl++] = 'l';
  for (int j = 0; j < c->nops; j++) {
    const Op *op = &g->op[c->op[j]];
    const EwOp *r = row(op->kind);
    for (const char *s = r->scalars; *s; s++) {
      if (*s == 'f')
        textbuf_printf(&params, ", float f%d", j), K->sig[sl++] = 'f';
      else if (*s == 'S')
        textbuf_printf(&params, ", const unsigned long long* S%d", j), K->sig[sl++] = 'p';
      else
        textbuf_printf(&params, ", unsigned U%d", j), K->sig[sl++] = 'u';
    }
    subst(&setup, r->setup, j, opnd);
    subst(&group, r->group, j, opnd);
    for (int i = 0; i < r->nval; i++)
      operand(g, c, j, i, opnd[i]);
    textbuf_printf(&body, "      const bf16 h%d = f32_to_bf16(", j);
    subst(&body, r->expr, j, opnd);
    textbuf_puts(&body, ");\n");
    int used = 0;
    for (int k = j + 1; k < c->nops; k++)
      for (int i = 0; i < row(g->op[c->op[k]].kind)->nval; i++)
        used |= g->op[c->op[k]].in[i] == op->out[0];
    if (used) textbuf_printf(&body, "      const float v%d = bf16_to_f32(h%d);\n", j, j);
    if (c->store[j]) textbuf_printf(&stores, "      out%d[i] = h%d;\n", j, j);
  }
  K->sig[sl] = 0;
  const char *keys[] = {"@NAME@",    "@CHAIN@",   "@PARAMS@", "@SETUP@\n",
                        "@GROUP@\n", "@LOADS@\n", "@BODY@\n", "@STORES@\n"};
  char *vals[] = {K->name,
                  key,
                  params.p ? params.p : "",
                  setup.p ? setup.p : "",
                  group.p ? group.p : "",
                  loads.p ? loads.p : "",
                  body.p ? body.p : "",
                  stores.p ? stores.p : ""};
  int oom = params.oom || setup.oom || group.oom || loads.oom || body.oom || stores.oom;
  K->src = oom ? NULL : fill(tpl->text, keys, vals, 8);
  free(params.p), free(setup.p), free(group.p), free(loads.p), free(body.p), free(stores.p);
  if (!K->src) return -1;
  return c->kernel = ks->n++;
}

void ew_kernels_free(EwKernels *ks) {
  for (int k = 0; k < ks->n; k++)
    free(ks->k[k].src), ks->k[k].src = NULL;
  ks->n = 0;
}

void ew_kernels_rt(const EwKernels *ks, RtGenKernels *out) {
  memset(out, 0, sizeof *out);
  for (int k = 0; ks && k < ks->n && k < RT_GEN_MAX; k++) {
    snprintf(out->k[k].name, sizeof out->k[k].name, "%s", ks->k[k].name);
    snprintf(out->k[k].sig, sizeof out->k[k].sig, "%s", ks->k[k].sig);
    out->n = k + 1;
  }
}

char *ew_kernels_text(const EwKernels *ks) {
  TextBuf b = {0};
  for (int k = 0; ks && k < ks->n; k++) {
    textbuf_puts(&b, KERNEL_FILE_MARKER);
    textbuf_printf(&b, "generated/%s\n", ks->k[k].name);
    textbuf_puts(&b, ks->k[k].src);
    textbuf_puts(&b, KERNEL_FILE_END_MARKER);
    textbuf_printf(&b, "generated/%s\n", ks->k[k].name);
  }
  return textbuf_take(&b);
}

char *ew_kernels_cu(const EwKernels *ks, char *err, size_t nerr) {
  char *hand = kernel_text_assemble(NULL, 0, err, nerr);
  if (!hand) return NULL;
  char *gen = ew_kernels_text(ks);
  TextBuf b = {0};
  textbuf_puts(&b, hand);
  if (gen)
    textbuf_puts(&b, gen);
  else
    b.oom = 1;
  free(hand), free(gen);
  char *src = textbuf_take(&b);
  if (!src) snprintf(err, nerr, "out of memory");
  return src;
}
