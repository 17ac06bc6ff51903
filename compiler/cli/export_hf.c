/* export_hf.c — stepc parameters to and from a Hugging Face Llama directory (export_hf.h). */
#include "cli/export_hf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/hf_config.h"
#include "ir.h"
#include "ops/ops.h"
#include "runtime/safe_file.h"
#include "runtime/safetensors.h"

/* One HF tensor: which stepc tensor it is cut from, and the rows [row0, row0 + rows); the stepc
 * tensor's shape as the recipe says: [total, cols] ([total] when cols is 0). */
typedef struct {
  char hf[ST_NAME_MAX], stepc[ST_NAME_MAX];
  int64_t row0, rows; /* rows -1: the whole tensor */
  int64_t total, cols;
} Map;

/* 1 when tensor e has shape [rows, cols] ([rows] when cols is 0); else err names both shapes. */
static int shape_is(const StEntry *e, const char *file, int64_t rows, int64_t cols, char *err, size_t nerr) {
  int ok =
      cols ? e->ndim == 2 && e->shape[0] == rows && e->shape[1] == cols : e->ndim == 1 && e->shape[0] == rows;
  if (ok) return 1;
  char got[96] = "", want[48];
  for (int d = 0, at = 0; d < e->ndim && at < (int)sizeof got - 24; d++)
    at += snprintf(got + at, sizeof got - (size_t)at, "%s%lld", d ? ", " : "", (long long)e->shape[d]);
  if (cols)
    snprintf(want, sizeof want, "%lld, %lld", (long long)rows, (long long)cols);
  else
    snprintf(want, sizeof want, "%lld", (long long)rows);
  snprintf(err, nerr, "%s: tensor %s has shape [%s]; the recipe's is [%s] (check the recipe's sizes)", file,
           e->name, got, want);
  return 0;
}

/* err from fmt; -1 */
__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t nerr, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, nerr, fmt, ap);
  va_end(ap);
  return -1;
}

static const char *llama_refusal(const Spec *s) {
  const SpecModel *m = &s->model;
  if (strcmp(m->normalization, "RMSNorm")) return "the norm is not RMSNorm";
  if (!m->gated_linear_unit || strcmp(m->activation_func, "silu")) return "the MLP is not SwiGLU";
  if (strcmp(m->position_embedding_type, "rope")) return "positions are not RoPE";
  if (m->add_bias_linear) return "the linear layers have biases";
  if (spec_is_moe(s) || m->multi_latent_attention ||
      (m->hybrid_override_pattern[0] && strcmp(m->hybrid_override_pattern, "null")))
    return "the layers are not dense attention + MLP (MoE, MLA or Mamba)";
  return NULL;
}

/* The tensor map of the recipe: n entries into map (room for 9 per layer + 3). */
static int build_map(const Spec *s, Map *map) {
  const SpecModel *m = &s->model;
  int64_t H = m->num_attention_heads, G = spec_num_query_groups(s), D = spec_kv_channels(s),
          F = spec_ffn_hidden_size(s);
  int64_t h = m->hidden_size, V = m->vocab_size;
  int n = 0;
  map[n++] = (Map){"model.embed_tokens.weight", "embedding.word_embeddings.weight", 0, -1, V, h};
  for (int64_t l = 0; l < m->num_layers; l++) {
    char st[ST_NAME_MAX], hf[ST_NAME_MAX];
#define MAP(hfname, stname, r0, nr, tot, c)                                                                  \
  do {                                                                                                       \
    snprintf(hf, sizeof hf, "model.layers.%lld." hfname, (long long)l);                                      \
    snprintf(st, sizeof st, "layers.%lld." stname, (long long)l);                                            \
    map[n] = (Map){"", "", r0, nr, tot, c};                                                                  \
    memcpy(map[n].hf, hf, sizeof hf), memcpy(map[n].stepc, st, sizeof st), n++;                              \
  } while (0)
    MAP("input_layernorm.weight", "input_layernorm.weight", 0, -1, h, 0);
    MAP("self_attn.q_proj.weight", "self_attention.linear_qkv.weight", 0, H * D, (H + 2 * G) * D, h);
    MAP("self_attn.k_proj.weight", "self_attention.linear_qkv.weight", H * D, G * D, (H + 2 * G) * D, h);
    MAP("self_attn.v_proj.weight", "self_attention.linear_qkv.weight", H * D + G * D, G * D, (H + 2 * G) * D,
        h);
    MAP("self_attn.o_proj.weight", "self_attention.linear_proj.weight", 0, -1, h, H * D);
    MAP("post_attention_layernorm.weight", "pre_mlp_layernorm.weight", 0, -1, h, 0);
    MAP("mlp.gate_proj.weight", "mlp.linear_fc1.weight", 0, F, 2 * F, h);
    MAP("mlp.up_proj.weight", "mlp.linear_fc1.weight", F, F, 2 * F, h);
    MAP("mlp.down_proj.weight", "mlp.linear_fc2.weight", 0, -1, h, F);
#undef MAP
  }
  map[n++] = (Map){"model.norm.weight", "final_layernorm.weight", 0, -1, h, 0};
  if (!m->share_embeddings_and_output_weights)
    map[n++] = (Map){"lm_head.weight", "output_layer.weight", 0, -1, V, h};
  return n;
}

static int write_config(const Spec *s, const char *dir, const char *dtype, char *err, size_t nerr) {
  const SpecModel *m = &s->model;
  char path[1100];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return fail(err, nerr, "cannot write %s", path);
  fprintf(f,
          "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n  \"hidden_size\": "
          "%lld,\n"
          "  \"intermediate_size\": %lld,\n  \"num_hidden_layers\": %lld,\n  \"num_attention_heads\": %lld,\n"
          "  \"num_key_value_heads\": %lld,\n  \"head_dim\": %lld,\n  \"vocab_size\": %lld,\n  "
          "\"max_position_embeddings\": %lld,\n"
          "  \"rms_norm_eps\": %.17g,\n  \"rope_theta\": %.17g,\n  \"hidden_act\": \"silu\",\n  "
          "\"attention_bias\": false,\n"
          "  \"mlp_bias\": false,\n  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"%s\"",
          (long long)m->hidden_size, (long long)spec_ffn_hidden_size(s), (long long)m->num_layers,
          (long long)m->num_attention_heads, (long long)spec_num_query_groups(s),
          (long long)spec_kv_channels(s), (long long)m->vocab_size, (long long)m->seq_length,
          m->layernorm_epsilon, m->rotary_base, m->share_embeddings_and_output_weights ? "true" : "false",
          !strcmp(dtype, "BF16") ? "bfloat16" : "float32");
  if (m->rope_scaling) /* Llama 3's, with Megatron's fixed constants (ops.h) */
    fprintf(
        f,
        ",\n  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": %.17g, \"low_freq_factor\": %.17g, "
        "\"high_freq_factor\": %.17g, \"original_max_position_embeddings\": %d}",
        m->rope_scaling_factor, ROPE_LLAMA3_LOW_FREQ_FACTOR, ROPE_LLAMA3_HIGH_FREQ_FACTOR,
        ROPE_LLAMA3_ORIGINAL_MAX_POS);
  fprintf(f, "\n}\n");
  return fclose(f) == 0 ? 0 : fail(err, nerr, "cannot write %s", path);
}

/* Writes the HF tensors of map[0..n) into a new safetensors file at path, each cut from its stepc
 * tensor in r, whose shape must be the recipe's. */
static int copy_rows(StReader *r, const char *path, const Map *map, int n, char *err, size_t nerr) {
  StEntry *e = calloc((size_t)n + 1, sizeof *e);
  const StEntry **from = calloc((size_t)n + 1, sizeof *from);
  if (!e || !from) {
    free(e), free(from);
    return fail(err, nerr, "out of memory");
  }
  int rc = 0;
  uint64_t maxb = 1;
  for (int i = 0; i < n && !rc; i++) {
    const StEntry *f = from[i] = st_find(r, map[i].stepc);
    if (!f)
      rc = fail(err, nerr, "%s has no tensor %s", r->path, map[i].stepc);
    else if (!shape_is(f, r->path, map[i].total, map[i].cols, err, nerr))
      rc = -1;
    else {
      e[i] = *f;
      snprintf(e[i].name, sizeof e[i].name, "%s", map[i].hf);
      e[i].shape[0] = map[i].rows < 0 ? map[i].total : map[i].rows;
      maxb = f->end - f->begin > maxb ? f->end - f->begin : maxb;
    }
  }
  unsigned char *buf = rc ? NULL : malloc(maxb);
  if (!rc && !buf) rc = fail(err, nerr, "out of memory");
  StWriter w;
  const char *meta[] = {"format", "pt"};
  if (!rc && st_write_begin(&w, path, e, n, meta, 1, err, nerr) != 0) rc = -1;
  for (int i = 0; i < n && !rc; i++) {
    const StEntry *f = from[i];
    size_t row_bytes = (size_t)((f->end - f->begin) / (uint64_t)map[i].total);
    if (st_read(r, f, buf, err, nerr) != 0 ||
        st_write_next(&w, buf + (size_t)map[i].row0 * row_bytes, err, nerr) != 0) {
      st_write_abort(&w);
      rc = -1;
    }
  }
  if (!rc && st_write_end(&w, err, nerr) != 0) rc = -1;
  free(buf), free(e), free(from);
  return rc;
}

static int open_params(const char *src, StReader *r, char *err, size_t nerr) {
  struct stat sb;
  char path[1100];
  if (stat(src, &sb) == 0 && S_ISDIR(sb.st_mode))
    snprintf(path, sizeof path, "%s/model.safetensors", src);
  else
    snprintf(path, sizeof path, "%s", src);
  return st_open(r, path, err, nerr);
}

/* Whether name is the HF name (hf) or stepc name (!hf) of an entry of map[0..n). */
static bool mapped(const Map *map, int n, const char *name, bool hf) {
  for (int i = 0; i < n; i++)
    if (!strcmp(hf ? map[i].hf : map[i].stepc, name)) return true;
  return false;
}

/* A tensor of r the recipe has no place for (another layer count, an untied head into a tied
 * recipe, biases): refused rather than dropped. HF's rotary inverse frequencies are buffers, not
 * weights. */
static int no_leftover(const Spec *s, const StReader *r, const Map *map, int n, bool hf, char *err,
                       size_t nerr) {
  for (int i = 0; i < r->n; i++) {
    const char *name = r->e[i].name;
    if (mapped(map, n, name, hf) || (hf && strstr(name, "rotary_emb.inv_freq"))) continue;
    return fail(
        err, nerr,
        "%s holds %s, which the recipe has no place for (it has %lld layers and %s output layer): it would "
        "be dropped; use the recipe the weights were made with",
        r->path, name, (long long)s->model.num_layers,
        s->model.share_embeddings_and_output_weights ? "a tied" : "an untied");
  }
  return 0;
}

/* The HF directory's tensors: model.safetensors, or the shards model.safetensors.index.json names. */
typedef struct {
  StReader *r;
  int n;
} Shards;

static void shards_close(Shards *sh) {
  for (int i = 0; i < sh->n; i++)
    st_close(&sh->r[i]);
  free(sh->r);
  sh->r = NULL, sh->n = 0;
}

static int shard_add(Shards *sh, const char *dir, const char *file, char *err, size_t nerr) {
  for (int i = 0; i < sh->n; i++) {
    const char *base = strrchr(sh->r[i].path, '/');
    if (!strcmp(base ? base + 1 : sh->r[i].path, file)) return i;
  }
  if (!file[0] || strchr(file, '/') || !strcmp(file, "..") || sh->n >= 4096)
    return fail(err, nerr,
                "%s/model.safetensors.index.json names the shard \"%s\": not a file of the directory", dir,
                file);
  StReader *r = realloc(sh->r, (size_t)(sh->n + 1) * sizeof *r);
  if (!r) return fail(err, nerr, "out of memory");
  sh->r = r;
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  if (st_open(&sh->r[sh->n], path, err, nerr) != 0) return -1;
  return sh->n++;
}

static int shards_open(const char *dir, Shards *sh, char *err, size_t nerr) {
  char path[1100];
  struct stat sb;
  memset(sh, 0, sizeof *sh);
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  if (lstat(path, &sb) != 0) {
    if (shard_add(sh, dir, "model.safetensors", err, nerr) >= 0) return 0;
    shards_close(sh);
    return -1;
  }
  char *text, file[256], name[ST_NAME_MAX];
  JsonSpan root, wm, v;
  if (hf_json_file(path, &text, &root, err, nerr) != 0) return -1;
  int rc = json_member(root, "weight_map", &wm) == 1 && json_is_object(wm)
               ? 0
               : fail(err, nerr, "%s has no weight_map object", path);
  size_t at = 0;
  int more;
  while (!rc && (more = json_member_next(wm, &at, name, sizeof name, &v)) != 0) {
    int k = more < 0 || json_string(v, file, sizeof file) != 0
                ? fail(err, nerr, "%s: a weight_map entry is malformed", path)
                : shard_add(sh, dir, file, err, nerr);
    if (k < 0)
      rc = -1;
    else if (!st_find(&sh->r[k], name))
      rc = fail(err, nerr, "%s maps %s to %s, which does not hold it", path, name, file);
  }
  free(text);
  if (rc) shards_close(sh);
  return rc;
}

static const StEntry *shards_find(Shards *sh, const char *name, StReader **r) {
  for (int i = 0; i < sh->n; i++) {
    const StEntry *e = st_find(&sh->r[i], name);
    if (e) return *r = &sh->r[i], e;
  }
  return NULL;
}

/* The largest shard export writes, in bytes: Hugging Face's save_pretrained default (max_shard_size
 * "5GB", 5e9 bytes), or STEPC_HF_SHARD_BYTES (a test knob: cli.hf_import shards a tiny model). */
static uint64_t shard_limit(void) {
  const char *v = getenv("STEPC_HF_SHARD_BYTES");
  char *end;
  unsigned long long b = v && *v ? strtoull(v, &end, 10) : 0;
  return b > 0 && !*end ? (uint64_t)b : 5000000000ull;
}

/* The bytes of map entry i (a row range of its stepc tensor in r); 0 when r lacks it (copy_rows
 * then names it). */
static uint64_t map_bytes(StReader *r, const Map *m) {
  const StEntry *f = st_find(r, m->stepc);
  if (!f || m->total <= 0) return 0;
  uint64_t all = f->end - f->begin;
  return m->rows < 0 ? all : all / (uint64_t)m->total * (uint64_t)m->rows;
}

/* The tensors of map[0..n) into DIR: model.safetensors when they fit one shard, else as Hugging
 * Face shards them (save_pretrained: tensors in order, a new shard where the next would pass the
 * limit) model-0000i-of-0000N.safetensors and model.safetensors.index.json (metadata.total_size,
 * weight_map). The other form's file, left by an earlier export, is removed: import would read it. */
static int write_tensors(StReader *r, const char *dir, const Map *map, int n, char *err, size_t nerr) {
  uint64_t limit = shard_limit(), cur = 0, total = 0;
  int *shard = calloc((size_t)n + 1, sizeof *shard), ns = 1;
  if (!shard) return fail(err, nerr, "out of memory");
  for (int i = 0; i < n; i++) {
    uint64_t b = map_bytes(r, &map[i]);
    if (cur > 0 && cur + b > limit) ns++, cur = 0;
    shard[i] = ns - 1, cur += b, total += b;
  }
  char path[1100], index[1100];
  snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
  int rc = 0;
  if (ns == 1) {
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rc = copy_rows(r, path, map, n, err, nerr);
    if (!rc && unlink(index) != 0 && errno != ENOENT)
      rc = fail(err, nerr, "cannot remove %s: %s", index, strerror(errno));
    free(shard);
    return rc;
  }
  for (int k = 0, i = 0; k < ns && !rc; k++) {
    int j = i;
    while (j < n && shard[j] == k)
      j++;
    snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, k + 1, ns);
    rc = copy_rows(r, path, map + i, j - i, err, nerr);
    i = j;
  }
  if (!rc && rt_check_replaceable(index, err, nerr) != 0) rc = -1;
  FILE *f = rc ? NULL : fopen(index, "w");
  if (!rc && !f) rc = fail(err, nerr, "cannot write %s", index);
  if (f) {
    fprintf(f, "{\n  \"metadata\": {\"total_size\": %llu},\n  \"weight_map\": {", (unsigned long long)total);
    for (int i = 0; i < n; i++)
      fprintf(f, "%s\n    \"%s\": \"model-%05d-of-%05d.safetensors\"", i ? "," : "", map[i].hf, shard[i] + 1,
              ns);
    fprintf(f, "\n  }\n}\n");
    if (fclose(f) != 0) rc = fail(err, nerr, "cannot write %s", index);
  }
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  if (!rc && unlink(path) != 0 && errno != ENOENT)
    rc = fail(err, nerr, "cannot remove %s: %s", path, strerror(errno));
  free(shard);
  return rc;
}

int export_hf(const Spec *s, const char *src, const char *dir, char *err, size_t nerr) {
  const char *why = llama_refusal(s);
  if (why)
    return fail(err, nerr,
                "stepc export writes Hugging Face Llama directories; this recipe is not Llama-style: %s",
                why);
  Map *map = calloc((size_t)(9 * s->model.num_layers + 3), sizeof *map);
  StReader r;
  int rc = -1;
  if (!map)
    snprintf(err, nerr, "out of memory");
  else if (open_params(src, &r, err, nerr) == 0) {
    int n = build_map(s, map);
    const StEntry *emb = st_find(&r, "embedding.word_embeddings.weight");
    char cfg[1100];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    if (no_leftover(s, &r, map, n, false, err, nerr) != 0)
      rc = -1;
    else if (mkdir(dir, 0777) != 0 && errno != EEXIST)
      snprintf(err, nerr, "cannot create %s: %s", dir, strerror(errno));
    /* checked before anything is written: a FIFO there would block the open, a link redirect it */
    else if (rt_check_replaceable(cfg, err, nerr) == 0 && write_tensors(&r, dir, map, n, err, nerr) == 0)
      rc = write_config(s, dir, emb ? emb->dtype : "BF16", err, nerr);
    st_close(&r);
  }
  free(map);
  return rc;
}

int import_hf(const Spec *s, const char *dir, const char *out, char *err, size_t nerr) {
  const char *why = llama_refusal(s);
  if (why)
    return fail(err, nerr,
                "stepc import reads Hugging Face Llama directories; this recipe is not Llama-style: %s", why);
  if (hf_config_check(s, dir, err, nerr) != 0) return -1;
  int cap = 9 * (int)s->model.num_layers + 3;
  Map *map = calloc((size_t)cap, sizeof *map);
  Shards sh;
  int rc = -1;
  if (!map) return fail(err, nerr, "out of memory");
  if (shards_open(dir, &sh, err, nerr) != 0) {
    free(map);
    return -1;
  }
  /* the fused stepc tensors are rebuilt by concatenating the HF pieces in map order: a temporary
   * file of HF pieces per stepc name would cost a copy; instead every stepc tensor is assembled
   * in memory, one at a time */
  int n = build_map(s, map), m = 0;
  StEntry *e = calloc((size_t)n + 1, sizeof *e);
  int *first = calloc((size_t)n + 1, sizeof *first), *count = calloc((size_t)n + 1, sizeof *count);
  if (!e || !first || !count) {
    snprintf(err, nerr, "out of memory");
    goto done;
  }
  for (int k = 0; k < sh.n; k++)
    if (no_leftover(s, &sh.r[k], map, n, true, err, nerr) != 0) goto done;
  for (int i = 0; i < n; i++) { /* stepc tensors in map order, each its run of pieces */
    StReader *r = NULL;
    const StEntry *p = shards_find(&sh, map[i].hf, &r);
    if (!p) {
      snprintf(err, nerr, "%s has no tensor %s", dir, map[i].hf);
      goto done;
    }
    if (!shape_is(p, r->path, map[i].rows < 0 ? map[i].total : map[i].rows, map[i].cols, err, nerr))
      goto done;
    if (m > 0 && !strcmp(e[m - 1].name, map[i].stepc)) {
      if (strcmp(e[m - 1].dtype, p->dtype)) {
        snprintf(err, nerr, "%s: %s's dtype differs from its neighbours'", r->path, map[i].hf);
        goto done;
      }
      e[m - 1].shape[0] += p->shape[0];
      count[m - 1]++;
      continue;
    }
    e[m] = *p;
    snprintf(e[m].name, sizeof e[m].name, "%s", map[i].stepc);
    first[m] = i, count[m] = 1;
    m++;
  }
  StWriter w;
  const char *meta[] = {"format", "stepc", "content", "params"};
  if (st_write_begin(&w, out, e, m, meta, 2, err, nerr) != 0) goto done;
  rc = 0;
  for (int k = 0; k < m && !rc; k++) {
    unsigned char *buf = malloc((size_t)(e[k].end - e[k].begin) + 1);
    size_t at = 0;
    for (int i = first[k]; i < first[k] + count[k] && buf && !rc; i++) {
      StReader *r = NULL;
      const StEntry *p = shards_find(&sh, map[i].hf, &r);
      if (st_read(r, p, buf + at, err, nerr) != 0) rc = -1;
      at += (size_t)(p->end - p->begin);
    }
    if (!buf) rc = -1, snprintf(err, nerr, "out of memory");
    if (!rc && st_write_next(&w, buf, err, nerr) != 0) rc = -1;
    free(buf);
  }
  if (rc)
    st_write_abort(&w);
  else if (st_write_end(&w, err, nerr) != 0)
    rc = -1;
done:
  free(e), free(first), free(count), free(map);
  shards_close(&sh);
  return rc;
}
