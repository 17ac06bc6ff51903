/* api_ckpt.c — parameters and checkpoints as safetensors (stepc.h).
 *
 * Tensors are stored at their nominal dtype (bf16 weights, fp32 masters and moments, int32 step
 * counter), named by their graph names, so the files are the same whichever device wrote them
 * and a PyTorch reference can read the weights directly. */
#define _GNU_SOURCE /* renameat2 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/api_internal.h"
#include "runtime/ckpt_state.h"
#include "runtime/safetensors.h"

#define ROLE_BIT(r) (1u << (r))
#define PARAMS ROLE_BIT(ROLE_PARAM)
#define OPTIMIZER (ROLE_BIT(ROLE_MASTER) | ROLE_BIT(ROLE_OPTIM))

static const char *st_dtype(DType d) {
  switch (d) {
  case DT_F32: return "F32";
  case DT_BF16: return "BF16";
  case DT_F16: return "F16";
  case DT_F64: return "F64";
  case DT_I32: return "I32";
  case DT_I64: return "I64";
  default: return "U8";
  }
}

static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* shard: of the optimizer state, this rank's part only (ZeRO-1: api_dp_not_mine); every param but
 * a sharded fp8 primary weight's fp32 master that another rank holds (api_dp_absent) */
static bool wanted(const stepc_t *s, unsigned roles, bool shard, int i) {
  unsigned bit = ROLE_BIT(s->g->t[i].role);
  return (roles & bit) && !(shard && api_dp_not_mine(s, i) && ((bit & OPTIMIZER) || api_dp_absent(s, i)));
}

/* ZeRO-1 with fp8 primary weights: the fp32 masters, which are the params of the fp8 linears, lie
 * in the optimizer-state region, each on its owner only, so model.safetensors is gathered (every
 * rank takes part; save_params_gathered) instead of written from rank 0's copy. */
static bool params_sharded(const stepc_t *s) {
  for (int i = 0; s->owner && s->comm && i < s->g->nt; i++)
    if (s->g->t[i].role == ROLE_PARAM && s->g->t[i].buffer == 1) return true;
  return false;
}

/* Tensor or expert parallelism: each rank holds its own shard of the state (Tensor.tp_nseg), so a
 * checkpoint keeps one file per rank (shard.rank<N>.safetensors: its params, masters and moments
 * as it holds them, the graph's names and the shard's shapes) beside model.safetensors (the params
 * gathered into the one-rank layout, stepc_save_params's file). */
static bool layout_shards(const stepc_t *s) { return s->tp > 1 || s->ep > 1; }

static stepc_status save_roles(stepc_t *s, const char *path, unsigned roles, bool shard, const char *kind) {
  const Graph *g = s->g;
  int n = 0;
  int64_t maxb = 1;
  for (int i = 0; i < g->nt; i++)
    if (wanted(s, roles, shard, i)) n++, maxb = g->t[i].bytes > maxb ? g->t[i].bytes : maxb;
  StEntry *e = calloc((size_t)n + 1, sizeof *e);
  int *ids = calloc((size_t)n + 1, sizeof *ids);
  void *buf = malloc((size_t)maxb);
  if (!e || !ids || !buf) {
    free(e), free(ids), free(buf);
    return api_fail(s, STEPC_ERR_NOMEM, "out of memory");
  }
  int k = 0;
  for (int i = 0; i < g->nt; i++) {
    const Tensor *t = &g->t[i];
    if (!wanted(s, roles, shard, i)) continue;
    snprintf(e[k].name, sizeof e[k].name, "%s", t->name);
    snprintf(e[k].dtype, sizeof e[k].dtype, "%s", st_dtype(t->dtype));
    e[k].ndim = t->ndim;
    memcpy(e[k].shape, t->shape, sizeof t->shape[0] * (size_t)t->ndim);
    ids[k++] = i;
  }
  char fp[20], step[24];
  snprintf(fp, sizeof fp, "%016" PRIx64, s->im.f.fingerprint);
  snprintf(step, sizeof step, "%lld", (long long)s->step);
  const char *meta[] = {"format", "stepc", "content", kind, "step", step, "step_fingerprint", fp};
  StWriter w;
  stepc_status st = STEPC_OK;
  char err[512] = "";
  if (st_write_begin(&w, path, e, n, meta, 4, err, sizeof err) != 0)
    st = api_fail(s, STEPC_ERR_IO, "%s", err);
  for (int j = 0; j < n && st == STEPC_OK; j++) {
    if (s->be->read(s, ids[j], buf) != 0) {
      st_write_abort(&w);
      st = STEPC_ERR_RUNTIME;
    } else if (st_write_next(&w, buf, err, sizeof err) != 0)
      st = api_fail(s, STEPC_ERR_IO, "%s", err);
  }
  if (st == STEPC_OK && st_write_end(&w, err, sizeof err) != 0) st = api_fail(s, STEPC_ERR_IO, "%s", err);
  free(e), free(ids), free(buf);
  return st;
}

/* Every tensor of the file is one the step reads: a file with more (a checkpoint of a deeper model,
 * another step's optimizer state) is another step's, not a subset to take silently. */
static stepc_status no_strangers(stepc_t *s, const StReader *r, unsigned roles, bool shard) {
  for (int k = 0; k < r->n; k++) {
    int i = 0;
    while (i < s->g->nt && !(wanted(s, roles, shard, i) && !strcmp(s->g->t[i].name, r->e[k].name)))
      i++;
    if (i == s->g->nt)
      return api_fail(s, STEPC_ERR_MISMATCH,
                      "%s holds tensor %s, which this step does not %s: the file belongs to another step",
                      r->path, r->e[k].name, shard ? "hold on this rank" : "have");
  }
  return STEPC_OK;
}

/* The fp32 master of param p that this rank holds, or -1. */
static int master_of(const stepc_t *s, int p) {
  for (int i = 0; i < s->g->nt; i++)
    if (s->g->t[i].role == ROLE_MASTER && s->g->t[i].of == p)
      return s->g->t[i].dtype == DT_F32 && !api_dp_not_mine(s, i) ? i : -1;
  return -1;
}

/* This rank's place in the group a sharded tensor is cut over. */
static int shard_rank(const stepc_t *s, const Tensor *t) { return t->tp_ep ? s->ep_rank : s->tp_rank; }

/* Reads every tensor of `roles` from path into the step, converting F32 <-> BF16 as needed. With
 * exact (one flag per tensor), a bf16 param the file holds in F32 also gives its fp32 master the
 * file's values, and its flag is set. whole: the file holds the one-rank tensors (a tensor- or
 * expert-parallel rank takes its shard's elements from each, tensor_tp_full_index). */
static stepc_status load_roles(stepc_t *s, const char *path, unsigned roles, bool shard, bool whole,
                               uint8_t *exact) {
  const Graph *g = s->g;
  StReader r;
  char err[600] = "";
  if (st_open(&r, path, err, sizeof err) != 0) return api_fail(s, STEPC_ERR_IO, "%s", err);
  stepc_status st = STEPC_OK;
  void *file = NULL, *nom = NULL;
  size_t cap = 0;
  for (int i = 0; i < g->nt && st == STEPC_OK; i++) {
    const Tensor *t = &g->t[i];
    if (!wanted(s, roles, shard, i)) continue;
    const StEntry *e = st_find(&r, t->name);
    if (!e) {
      st = api_fail(s, STEPC_ERR_MISMATCH, "%s has no tensor %s (the step's %s)", path, t->name,
                    role_name(t->role));
      break;
    }
    bool cut = whole && t->tp_nseg > 0;
    int64_t shape[IR_MAX_DIMS];
    tensor_tp_full_shape(t, shape); /* a whole tensor's own shape */
    bool same = e->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++)
      same = e->shape[d] == (whole ? shape[d] : t->shape[d]);
    if (!same) {
      st = api_fail(s, STEPC_ERR_MISMATCH, "%s: tensor %s has another shape than the step's%s", path, t->name,
                    cut ? " (the one-rank shape)" : "");
      break;
    }
    int64_t n = tensor_numel(t), nfile = st_numel(e);
    size_t fes = nfile > 0 ? (size_t)(e->end - e->begin) / (size_t)nfile : dtype_size(t->dtype);
    size_t need =
        (size_t)(e->end - e->begin) > (size_t)t->bytes ? (size_t)(e->end - e->begin) : (size_t)t->bytes;
    if (need < (size_t)n * 8) need = (size_t)n * 8;
    if (need > cap) {
      free(file), free(nom);
      file = malloc(need), nom = malloc(need);
      cap = need;
      if (!file || !nom) {
        st = api_fail(s, STEPC_ERR_NOMEM, "out of memory");
        break;
      }
    }
    if (st_read(&r, e, file, err, sizeof err) != 0) {
      st = api_fail(s, STEPC_ERR_IO, "%s", err);
      break;
    }
    if (cut) { /* this rank's elements of the one-rank tensor, in place at the buffer's start */
      int rank = shard_rank(s, t);
      for (int64_t j = 0; j < n; j++)
        memmove((unsigned char *)nom + (size_t)j * fes,
                (unsigned char *)file + (size_t)tensor_tp_full_index(t, rank, j) * fes, fes);
      memcpy(file, nom, (size_t)n * fes);
    }
    const void *src = file;
    if (strcmp(e->dtype, st_dtype(t->dtype)) != 0) {
      if (t->dtype == DT_BF16 && !strcmp(e->dtype, "F32"))
        for (int64_t j = 0; j < n; j++)
          ((uint16_t *)nom)[j] = f32_to_bf16(((const float *)file)[j]);
      else if (t->dtype == DT_F32 && !strcmp(e->dtype, "BF16"))
        for (int64_t j = 0; j < n; j++)
          ((float *)nom)[j] = bf16_to_f32(((const uint16_t *)file)[j]);
      else {
        st = api_fail(s, STEPC_ERR_MISMATCH, "%s: tensor %s is %s, the step's is %s", path, t->name, e->dtype,
                      st_dtype(t->dtype));
        break;
      }
      src = nom;
    }
    if (!api_dp_absent(s, i) && s->be->write(s, i, src) != 0) st = STEPC_ERR_RUNTIME; /* else its owner's */
    int m = exact && src == nom && t->dtype == DT_BF16 ? master_of(s, i) : -1;
    if (st == STEPC_OK && m >= 0) {
      exact[i] = 1;
      if (s->be->write(s, m, file) != 0) st = STEPC_ERR_RUNTIME;
    }
  }
  free(file), free(nom);
  if (st == STEPC_OK) st = no_strangers(s, &r, roles, shard);
  st_close(&r);
  return st;
}

/* FNV-1a of a whole file and its size. 0, or -1 when it cannot be read. */
static int file_sum(const char *path, int follow, uint64_t *h, uint64_t *bytes) {
  char err[1300];
  return rt_file_fnv1a(path, follow, h, bytes, err, sizeof err);
}

/* Tensor parallelism: each param whole, as one rank holds it — a shard's TP group gathers it
 * (every rank of the job takes part, tensor by tensor) and rank 0 puts each rank's elements at
 * their places in the one-rank tensor (tensor_tp_full_index) and writes the file, which a one-rank
 * artifact of the recipe loads. Rank 0's status reaches every rank. Expert parallelism likewise:
 * an expert weight's shard (Tensor.tp_ep) is gathered over the EP group. A param only its
 * data-parallel owner holds (params_sharded) comes from it first, over the data-parallel group;
 * every: each rank writes the file at its path (stepc_save_params without TP / EP, as under plain
 * data parallelism), else rank 0 alone. */
static stepc_status save_params_gathered(stepc_t *s, const char *path, bool every) {
  const Graph *g = s->g;
  int n = 0, most = s->tp > s->ep ? s->tp : s->ep;
  if (s->dp > most) most = s->dp;
  if (s->edp_group.count > most) most = s->edp_group.count;
  int64_t maxn = 1;
  for (int i = 0; i < g->nt; i++)
    if (g->t[i].role == ROLE_PARAM) n++, maxn = tensor_numel(&g->t[i]) > maxn ? tensor_numel(&g->t[i]) : maxn;
  StEntry *e = calloc((size_t)n + 1, sizeof *e);
  int *ids = calloc((size_t)n + 1, sizeof *ids);
  unsigned char *mine = malloc((size_t)maxn * 8), *all = malloc((size_t)maxn * 8 * (size_t)most),
                *full = malloc((size_t)maxn * 8 * (size_t)most);
  stepc_status st = STEPC_OK;
  bool have = e && ids && mine && all && full;
  if (!have) st = api_fail(s, STEPC_ERR_NOMEM, "out of memory");
  int k = 0;
  for (int i = 0; i < g->nt && have; i++) {
    const Tensor *t = &g->t[i];
    if (t->role != ROLE_PARAM) continue;
    int64_t shape[IR_MAX_DIMS];
    tensor_tp_full_shape(t, shape);
    snprintf(e[k].name, sizeof e[k].name, "%s", t->name);
    snprintf(e[k].dtype, sizeof e[k].dtype, "%s", st_dtype(t->dtype));
    e[k].ndim = t->ndim;
    memcpy(e[k].shape, shape, sizeof shape[0] * (size_t)t->ndim);
    ids[k++] = i;
  }
  char fp[20], step[24], err[512] = "";
  snprintf(fp, sizeof fp, "%016" PRIx64, s->im.f.fingerprint);
  snprintf(step, sizeof step, "%lld", (long long)s->step);
  const char *meta[] = {"format", "stepc", "content", "params", "step", step, "step_fingerprint", fp};
  StWriter w;
  bool lead = every || s->rank == 0, open = false;
  if (st == STEPC_OK && lead) {
    if (st_write_begin(&w, path, e, n, meta, 4, err, sizeof err) != 0)
      st = api_fail(s, STEPC_ERR_IO, "%s", err);
    else
      open = true;
  }
  /* every rank gathers every shard, whatever rank 0's writing did: the ranks stay in step */
  for (int j = 0; j < n && have; j++) {
    const Tensor *t = &g->t[ids[j]];
    int64_t m = tensor_numel(t);
    size_t es = dtype_size(t->dtype);
    if (api_dp_absent(s, ids[j]))
      memset(mine, 0, (size_t)m * es);
    else if (s->be->read(s, ids[j], mine) != 0)
      memset(mine, 0, (size_t)m * es), st = STEPC_ERR_RUNTIME;
    if (t->buffer == 1 && s->owner && s->comm) { /* a sharded master: its owner's, over its owners' group */
      const RtCommGroup *grp = s->ep > 1 && graph_expert_state(g, ids[j]) ? &s->edp_group : &s->dp_group;
      if (rt_comm_group_all_gather(s->comm, grp, mine, all, (size_t)m * es) != 0) {
        st = api_fail(s, STEPC_ERR_RUNTIME, "data parallel, gathering %s: %s", t->name,
                      rt_comm_error(s->comm));
        break;
      }
      memcpy(mine, all + (size_t)s->owner[ids[j]] * (size_t)m * es, (size_t)m * es);
    }
    const unsigned char *src = mine;
    if (t->tp_nseg > 0) {
      int size = t->tp_ep ? s->ep : s->tp;
      if (rt_comm_group_all_gather(s->comm, t->tp_ep ? &s->ep_group : &s->tp_group, mine, all,
                                   (size_t)m * es) != 0) {
        st = api_fail(s, STEPC_ERR_RUNTIME, "%s parallel, gathering %s: %s", t->tp_ep ? "expert" : "tensor",
                      t->name, rt_comm_error(s->comm));
        break;
      }
      for (int r = 0; r < size; r++)
        for (int64_t x = 0; x < m; x++)
          memcpy(full + (size_t)tensor_tp_full_index(t, r, x) * es,
                 all + ((size_t)r * (size_t)m + (size_t)x) * es, es);
      src = full;
    }
    if (open && st == STEPC_OK && st_write_next(&w, src, err, sizeof err) != 0)
      st = api_fail(s, STEPC_ERR_IO, "%s", err), open = false;
  }
  if (open && st == STEPC_OK && st_write_end(&w, err, sizeof err) != 0)
    st = api_fail(s, STEPC_ERR_IO, "%s", err);
  else if (open && st != STEPC_OK)
    st_write_abort(&w);
  int64_t v = st;
  if (rt_comm_broadcast(s->comm, &v, sizeof v, 0) != 0)
    st = api_fail(s, STEPC_ERR_RUNTIME, "tensor parallel: %s", rt_comm_error(s->comm));
  else if (!lead && v != STEPC_OK && st == STEPC_OK)
    st = api_fail(s, (stepc_status)v, "stepc_save_params: rank 0 could not write %s (its error says why)",
                  path);
  free(e), free(ids), free(mine), free(all), free(full);
  return st;
}

stepc_status stepc_save_params(stepc_t *s, const char *path) {
  if (!s || !s->be || !path)
    return s ? api_fail(s, STEPC_ERR_ARGUMENT, "stepc_save_params: path is NULL") : STEPC_ERR_ARGUMENT;
  if (s->tp > 1 || s->ep > 1 || params_sharded(s)) return save_params_gathered(s, path, !layout_shards(s));
  return save_roles(s, path, PARAMS, false, "params");
}

/* Masters take the loaded weights: the next AdamW step starts from them (but those exact[] says
 * took the file's fp32 values already). */
static stepc_status masters_from_params(stepc_t *s, const uint8_t *exact) {
  const Graph *g = s->g;
  stepc_status st = STEPC_OK;
  for (int i = 0; i < g->nt && st == STEPC_OK; i++) {
    const Tensor *m = &g->t[i];
    if (m->role != ROLE_MASTER || m->of < 0 || api_dp_not_mine(s, i) || exact[m->of])
      continue; /* ZeRO-1: the owner's */
    const Tensor *p = &g->t[m->of];
    int64_t n = tensor_numel(m);
    void *pb = malloc((size_t)p->bytes + 1);
    float *mb = malloc((size_t)n * sizeof *mb + 1);
    if (!pb || !mb)
      st = api_fail(s, STEPC_ERR_NOMEM, "out of memory");
    else if (s->be->read(s, m->of, pb) != 0)
      st = STEPC_ERR_RUNTIME;
    else {
      for (int64_t j = 0; j < n; j++)
        mb[j] = p->dtype == DT_BF16 ? bf16_to_f32(((uint16_t *)pb)[j]) : ((float *)pb)[j];
      if (s->be->write(s, i, mb) != 0) st = STEPC_ERR_RUNTIME;
    }
    free(pb), free(mb);
  }
  return st;
}

/* A parameter the file holds in fp32 (a Hugging Face model saved in float32, say) keeps every bit
 * in its fp32 master, and the param is what the optimizer leaves from it (cpu: the fp32 value
 * itself; cuda: its bf16 rounding, as loaded). A ZeRO-1 rank holds only its shard of masters: its
 * params stay as loaded, the same on every rank, until the first step's broadcast. */
stepc_status stepc_load_params(stepc_t *s, const char *path) {
  if (!s || !s->be) return STEPC_ERR_ARGUMENT;
  uint8_t *exact = path ? calloc((size_t)s->g->nt + 1, 1) : NULL;
  stepc_status st = !path    ? api_fail(s, STEPC_ERR_ARGUMENT, "stepc_load_params: path is NULL")
                    : !exact ? api_fail(s, STEPC_ERR_NOMEM, "out of memory")
                             : load_roles(s, path, PARAMS, false, true, exact);
  if (st == STEPC_OK) st = masters_from_params(s, exact);
  bool any = false, sharded = s->owner && s->world > 1;
  for (int i = 0; exact && i < s->g->nt; i++)
    any |= exact[i];
  free(exact);
  if (st == STEPC_OK && any && !sharded && s->be->params_from_masters(s) != 0) st = STEPC_ERR_RUNTIME;
  if (st == STEPC_OK) st = api_fp8_param_casts(s);
  /* data parallel: every rank must have loaded the same file (its checksum, read again only then) */
  uint64_t h = 0, bytes = 0;
  if (st == STEPC_OK && s->comm && file_sum(path, RT_FOLLOW, &h, &bytes) != 0)
    st = api_fail(s, STEPC_ERR_IO, "cannot read back %s", path);
  return api_dp_agree_load(s, st, "parameters", s->step, h);
}

static void join(char *out, size_t n, const char *dir, const char *name) {
  snprintf(out, n, "%s/%s", dir, name);
}

/* The file of rank `rank`'s state beside model.safetensors: its shard of everything under TP / EP
 * (layout_shards), its optimizer shard under ZeRO-1, else the one optimizer file. */
static void state_file_name(const stepc_t *s, int rank, char *name, size_t n) {
  if (layout_shards(s))
    snprintf(name, n, "shard.rank%d.safetensors", rank);
  else if (s->owner && s->world > 1)
    snprintf(name, n, "optimizer.rank%d.safetensors", rank);
  else
    snprintf(name, n, "optimizer.safetensors");
}

/* This rank's state file in dir. */
static void optimizer_file(const stepc_t *s, const char *dir, char *path, size_t n) {
  char name[64];
  state_file_name(s, s->rank, name, sizeof name);
  join(path, n, dir, name);
}

/* Rank 0's part: the parameters and the (unsharded) optimizer state. */
static stepc_status save_all(stepc_t *s, const char *dir) {
  char path[1100];
  join(path, sizeof path, dir, "model.safetensors");
  stepc_status st = save_roles(s, path, PARAMS, false, "params");
  if (st != STEPC_OK) return st;
  optimizer_file(s, dir, path, sizeof path);
  if (!(s->owner && s->world > 1) && (st = save_roles(s, path, OPTIMIZER, false, "optimizer")) != STEPC_OK)
    return st;
  return STEPC_OK;
}

static int fsync_path(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* The checkpoint's files (as state.json lists them): the parameters, then the state files, one or
 * one per rank (state_file_name). Their count. */
static int checkpoint_file(const stepc_t *s, int i, char *name, size_t n) {
  int files = (s->owner && s->world > 1) || layout_shards(s) ? s->world : 1;
  if (i == 0)
    snprintf(name, n, "model.safetensors");
  else
    state_file_name(s, i - 1, name, n);
  return 1 + files;
}

/* state.json, last, with every file's size and FNV-1a: a checkpoint is what state.json names. */
static stepc_status save_state(stepc_t *s, const char *dir) {
  char path[1100], tmp[1110], name[64];
  join(path, sizeof path, dir, "state.json");
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return api_fail(s, STEPC_ERR_IO, "cannot write %s", tmp);
  const CpuData *d = &s->data.recipe;
  /* The data position and every RNG draw (dropout masks, mock tokens, text windows) are pure
   * functions of (seed, step): the step counter is the whole RNG and data state. */
  fprintf(f,
          "{\n  \"format\": \"stepc-checkpoint\",\n  \"version\": 2,\n  \"step\": %lld,\n  \"seed\": %llu,\n",
          (long long)s->step, (unsigned long long)s->im.f.seed);
  fprintf(f, "  \"data\": {\"source\": \"%s\", \"next_step\": %lld},\n", d->text ? "path" : "mock",
          (long long)s->step + 1);
  fprintf(f,
          "  \"device\": \"%s\",\n  \"step_fingerprint\": \"%016" PRIx64 "\",\n  \"recipe\": ", s->be->name,
          s->im.f.fingerprint);
  json_write_string(f, s->im.f.recipe);
  fprintf(f,
          ",\n  \"world_size\": %d,\n  \"tensor_parallel\": %d,\n  \"expert_parallel\": %d,\n  "
          "\"distributed_optimizer\": %s,\n  \"files\": {",
          s->world, s->tp, s->ep, s->im.f.dist_opt ? "true" : "false");
  int nf = checkpoint_file(s, 0, name, sizeof name);
  for (int i = 0; i < nf; i++) {
    char fp[1200];
    uint64_t h, bytes;
    checkpoint_file(s, i, name, sizeof name);
    join(fp, sizeof fp, dir, name);
    if (file_sum(fp, RT_NOFOLLOW, &h, &bytes) != 0) {
      fclose(f), remove(tmp);
      return api_fail(s, STEPC_ERR_IO, "cannot read back %s", fp);
    }
    fprintf(f, "%s\n    \"%s\": {\"bytes\": %llu, \"fnv1a\": \"%016" PRIx64 "\"}", i ? "," : "", name,
            (unsigned long long)bytes, h);
  }
  fprintf(f, "\n  }\n}\n");
  int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
  if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
    remove(tmp);
    return api_fail(s, STEPC_ERR_IO, "cannot write %s", path);
  }
  return STEPC_OK;
}

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb, (void)type, (void)ftw;
  return remove(path);
}
static void rm_rf(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* dir's folder, and the directory beside it the checkpoint is written into first: the same name
 * on every rank, so that the ranks' shards meet there. 0, or -1 for a dir that names none. */
static int staging_of(const char *dir, char *parent, size_t np, char *stage, size_t ns) {
  char d[1024];
  if (snprintf(d, sizeof d, "%s", dir) >= (int)sizeof d) return -1;
  size_t n = strlen(d);
  while (n > 1 && d[n - 1] == '/')
    d[--n] = 0;
  char *slash = strrchr(d, '/');
  const char *base = slash ? slash + 1 : d;
  if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) return -1;
  snprintf(stage, ns, "%.*s.%s.saving", slash ? (int)(slash - d + 1) : 0, d, base);
  if (slash == d)
    snprintf(parent, np, "/");
  else if (slash)
    *slash = 0, snprintf(parent, np, "%s", d);
  else
    snprintf(parent, np, ".");
  return 0;
}

/* Rank 0 before a save: dir must be a directory a save may replace (ckpt_dir_replaceable: nothing
 * that is not a checkpoint is ever removed), and a staging directory left by a save killed before
 * its rename is cleared only when it holds nothing but a save's files. */
static stepc_status prepare_save(stepc_t *s, const char *dir, const char *parent, const char *stage) {
  char why[1600];
  if (ckpt_dir_replaceable(dir, false, why, sizeof why) != 0 ||
      ckpt_dir_replaceable(stage, true, why, sizeof why) != 0)
    return api_fail(s, STEPC_ERR_IO, "stepc_save_checkpoint: %s", why);
  rm_rf(stage);
  if (mkdir(parent, 0777) != 0 && errno != EEXIST)
    return api_fail(s, STEPC_ERR_IO, "cannot create %s", parent);
  if (mkdir(stage, 0777) != 0)
    return api_fail(s, STEPC_ERR_IO, "cannot create %s: %s", stage, strerror(errno));
  return STEPC_OK;
}

/* Data parallel: rank 0's preparation status on every rank, so that all refuse together; it also
 * orders the other ranks' shards after the staging directory exists. */
static stepc_status prepared_on_all(stepc_t *s, stepc_status st, const char *dir) {
  if (!s->comm) return st;
  int32_t v = (int32_t)st;
  if (rt_comm_broadcast(s->comm, &v, sizeof v, 0) != 0)
    return api_fail(s, STEPC_ERR_RUNTIME, "stepc_save_checkpoint: data parallel: %s", rt_comm_error(s->comm));
  if (s->rank != 0 && v != STEPC_OK)
    return api_fail(
        s, (stepc_status)v,
        "stepc_save_checkpoint: rank 0 refused to write %s (its error says why); nothing was written", dir);
  return st;
}

stepc_status stepc_save_checkpoint(stepc_t *s, const char *dir) {
  if (!s || !s->be || !dir)
    return s ? api_fail(s, STEPC_ERR_ARGUMENT, "stepc_save_checkpoint: dir is NULL") : STEPC_ERR_ARGUMENT;
  /* All or nothing: the checkpoint is written into a fresh directory beside dir, every file
   * fsynced, state.json (every file's size and checksum) last, then swapped in with one rename.
   * Killed at any moment, dir is the old checkpoint or the new one, never a mixture. Data
   * parallel: every rank holds the same state, so rank 0 writes the one copy (ZeRO-1: every rank
   * its optimizer shard); tensor or expert parallel: every rank takes part in gathering
   * model.safetensors, which rank 0 writes, and writes its own shard file (layout_shards); barriers
   * order the ranks around rank 0's steps. */
  char parent[1024], stage[1100];
  struct stat sb;
  if (staging_of(dir, parent, sizeof parent, stage, sizeof stage) != 0)
    return api_fail(s, STEPC_ERR_ARGUMENT, "stepc_save_checkpoint: %s does not name a directory to write",
                    dir);
  bool lead = !s->comm || s->rank == 0;
  stepc_status st = prepared_on_all(s, lead ? prepare_save(s, dir, parent, stage) : STEPC_OK, dir);
  if (st != STEPC_OK) return st;
  if (layout_shards(s)) { /* every rank gathers (a collective), rank 0 writes; then each its shard */
    char path[1200];
    join(path, sizeof path, stage, "model.safetensors");
    st = save_params_gathered(s, path, false);
    optimizer_file(s, stage, path, sizeof path);
    /* with ZeRO-1 under TP / EP: the rank's params and its data-parallel shard of the optimizer state */
    if (st == STEPC_OK) st = save_roles(s, path, PARAMS | OPTIMIZER, s->owner && s->world > 1, "shard");
  } else if (params_sharded(s)) { /* every rank gathers the masters it does not hold, rank 0 writes */
    char path[1200];
    join(path, sizeof path, stage, "model.safetensors");
    st = save_params_gathered(s, path, false);
  } else if (lead)
    st = save_all(s, stage);
  if (st == STEPC_OK && s->owner && s->world > 1 &&
      !layout_shards(s)) { /* every rank its shard of masters and moments */
    char path[1200];
    optimizer_file(s, stage, path, sizeof path);
    st = save_roles(s, path, OPTIMIZER, true, "optimizer");
  }
  if (s->comm && rt_comm_barrier(s->comm) != 0)
    return api_fail(s, STEPC_ERR_RUNTIME, "stepc_save_checkpoint: data parallel: %s", rt_comm_error(s->comm));
  if (st == STEPC_OK && lead && (st = save_state(s, stage)) == STEPC_OK) {
    bool had = lstat(dir, &sb) == 0;
    if (fsync_path(stage) != 0 ||
        (had ? renameat2(AT_FDCWD, stage, AT_FDCWD, dir, RENAME_EXCHANGE) : rename(stage, dir)) != 0)
      st = api_fail(s, STEPC_ERR_IO, "cannot move the checkpoint into %s: %s", dir, strerror(errno));
    else {
      fsync_path(parent);
      if (had) rm_rf(stage); /* now the old checkpoint */
    }
  }
  if (lead && st != STEPC_OK) rm_rf(stage);
  if (s->comm && rt_comm_barrier(s->comm) != 0)
    return api_fail(s, STEPC_ERR_RUNTIME, "stepc_save_checkpoint: data parallel: %s", rt_comm_error(s->comm));
  return st;
}

/* The checkpoint's state against this step: seed, layout, the step that wrote it. */
static stepc_status state_matches(stepc_t *s, const char *dir, const CkptState *cs) {
  if ((unsigned long long)cs->seed != (unsigned long long)s->im.f.seed)
    return api_fail(s, STEPC_ERR_MISMATCH,
                    "%s/state.json was written with train.seed=%lld, this step has %lld: the data and "
                    "dropout streams would differ "
                    "(open the recipe with train.seed=%lld)",
                    dir, cs->seed, (long long)s->im.f.seed, cs->seed);
  if (cs->tp != s->tp || cs->ep != s->ep || ((cs->tp > 1 || cs->ep > 1) && cs->world != s->world))
    return api_fail(
        s, STEPC_ERR_MISMATCH,
        "%s was written by %lld ranks at TP %lld, EP %lld (each rank its shard of the state); this job "
        "has %d ranks at TP %d, EP %d: the shards cannot be re-cut at load — resume with the layout "
        "that wrote it (to carry the weights into another layout, load %s/model.safetensors with "
        "stepc_load_params)",
        dir, cs->world, cs->tp, cs->ep, s->world, s->tp, s->ep, dir);
  bool job_shards = s->owner && s->world > 1;
  if (cs->sharded != job_shards)
    return api_fail(s, STEPC_ERR_MISMATCH,
                    "%s holds the optimizer state %s; this job %s it (optimizer.use_distributed_optimizer "
                    "over %d ranks): "
                    "resume with the layout that wrote it",
                    dir, cs->sharded ? "sharded over the ranks" : "whole",
                    job_shards ? "shards" : "does not shard", s->world);
  if (cs->sharded && cs->world != s->world)
    return api_fail(
        s, STEPC_ERR_MISMATCH,
        "%s holds optimizer state sharded over %lld data-parallel ranks; this job has %d: the distributed "
        "optimizer's shards cannot be re-cut at load — resume with %lld ranks",
        dir, cs->world, s->world, cs->world);
  /* the step that wrote it: the same recipe (model, recompute, optimizer, schedule). A plain-DP
   * checkpoint may resume under another world size (its micro-batch count, and so its
   * fingerprint, differs; the state is whole): the tensors are checked one by one instead. */
  char mine[17];
  snprintf(mine, sizeof mine, "%016" PRIx64, s->im.f.fingerprint);
  if (cs->fingerprint[0] && cs->world == s->world && strcmp(cs->fingerprint, mine) != 0)
    return api_fail(s, STEPC_ERR_MISMATCH,
                    "%s was saved by another step (recipe %s, step fingerprint %s); this artifact is recipe "
                    "%s, step fingerprint %s: "
                    "a checkpoint resumes only the step that wrote it (to carry the weights alone into "
                    "another step, load "
                    "%s/model.safetensors with stepc_load_params)",
                    dir, cs->recipe[0] ? cs->recipe : "?", cs->fingerprint, s->im.f.recipe, mine, dir);
  return STEPC_OK;
}

/* Each file this rank reads against its size and checksum in a version-2 state.json. */
static stepc_status files_match(stepc_t *s, const char *dir, const char *text) {
  char opt_name[64], path[1100], *slash;
  optimizer_file(s, "", path, sizeof path);
  slash = strrchr(path, '/');
  snprintf(opt_name, sizeof opt_name, "%s", slash ? slash + 1 : path);
  const char *mine[2] = {"model.safetensors", opt_name};
  for (int i = 0; i < 2; i++) {
    char fp[1200], want_sum[17];
    unsigned long long want_bytes = 0;
    if (ckpt_state_file(text, mine[i], &want_bytes, want_sum) != 0)
      return api_fail(s, STEPC_ERR_IO, "%s: state.json does not list %s with its size and checksum", dir,
                      mine[i]);
    uint64_t h, bytes;
    join(fp, sizeof fp, dir, mine[i]);
    if (file_sum(fp, RT_NOFOLLOW, &h, &bytes) != 0)
      return api_fail(s, STEPC_ERR_IO, "%s: cannot read %s (a regular file)", dir, mine[i]);
    char got[17];
    snprintf(got, sizeof got, "%016" PRIx64, h);
    if (bytes != want_bytes || strcmp(got, want_sum) != 0)
      return api_fail(s, STEPC_ERR_IO,
                      "%s: %s is damaged (%llu bytes, checksum %s; state.json says %llu bytes, %s)", dir,
                      mine[i], (unsigned long long)bytes, got, want_bytes, want_sum);
  }
  return STEPC_OK;
}

/* This rank's part of a load: the state, the files, the tensors. *step and *fp: state.json's step
 * and checksum (what the ranks compare). */
static stepc_status load_here(stepc_t *s, const char *dir, long long *step, uint64_t *fp) {
  char path[1100], text[STEPC_STATE_MAX_BYTES],
      why[1300]; /* room for every shard's line of a ZeRO-1 checkpoint */
  size_t n = 0;
  bool more = false;
  if (ckpt_state_read(dir, text, sizeof text, &n, &more, why, sizeof why) != 0)
    return api_fail(s, STEPC_ERR_IO, "%s is not a stepc checkpoint: %s", dir, why);
  *fp = ir_fnv1a(IR_FNV_OFFSET, text, n);
  CkptState cs;
  if (ckpt_state_parse(text, n, more, &cs, why, sizeof why) != 0)
    return api_fail(s, STEPC_ERR_IO, "%s/state.json: %s", dir, why);
  *step = cs.step;
  stepc_status st = state_matches(s, dir, &cs);
  if (st == STEPC_OK && cs.version >= 2) st = files_match(s, dir, text);
  if (st != STEPC_OK) return st;
  if (layout_shards(s)) { /* this rank's shard file holds all it needs */
    optimizer_file(s, dir, path, sizeof path);
    if ((st = load_roles(s, path, PARAMS | OPTIMIZER, s->owner && s->world > 1, false, NULL)) != STEPC_OK)
      return st;
  } else {
    join(path, sizeof path, dir, "model.safetensors");
    if ((st = load_roles(s, path, PARAMS, false, false, NULL)) != STEPC_OK) return st;
    optimizer_file(s, dir, path, sizeof path);
    if ((st = load_roles(s, path, OPTIMIZER, s->owner && s->world > 1, false, NULL)) != STEPC_OK) return st;
  }
  /* the optimizer's own step counter (it drives the LR schedule and Adam's bias correction) must
   * be state.json's */
  for (int i = 0; i < s->g->nt; i++) {
    if (strcmp(s->g->t[i].name, "optimizer.step") || s->g->t[i].dtype != DT_I32 ||
        !wanted(s, OPTIMIZER, s->owner && s->world > 1, i))
      continue;
    int32_t counter = 0;
    if (s->be->read(s, i, &counter) != 0) return STEPC_ERR_RUNTIME;
    if ((long long)counter != cs.step)
      return api_fail(
          s, STEPC_ERR_MISMATCH,
          "%s: state.json says step %lld, the optimizer's counter %d: the files do not belong together", dir,
          cs.step, counter);
  }
  return s->be->params_from_masters(s) != 0 ? STEPC_ERR_RUNTIME : api_fp8_param_casts(s);
}

stepc_status stepc_load_checkpoint(stepc_t *s, const char *dir) {
  if (!s || !s->be) return STEPC_ERR_ARGUMENT;
  long long step = 0;
  uint64_t fp = 0;
  stepc_status st = dir ? load_here(s, dir, &step, &fp)
                        : api_fail(s, STEPC_ERR_ARGUMENT, "stepc_load_checkpoint: dir is NULL");
  /* data parallel: every rank resumes the same checkpoint at the same step, or none does */
  if ((st = api_dp_agree_load(s, st, "checkpoint", step, fp)) != STEPC_OK) return st;
  /* ZeRO-1 on the cpu device: the masters here are this rank's shard, the params were set from
   * them, and the other params come from their owners. On cuda every rank loaded the saved bf16
   * params whole (the owners' values, the same on every rank): nothing to exchange. */
  if (s->owner && s->comm && !strcmp(s->be->name, "cpu") && api_cpu_zero_gather(s) != 0)
    return STEPC_ERR_RUNTIME;
  s->step = step;
  return STEPC_OK;
}
