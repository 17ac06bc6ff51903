/* dump.c — `gpu_step dump`: the first training step's inputs, weights, losses and main gradients
 * as files, for tests/gpu/torch_ref.py to recompute in PyTorch.
 *
 *   gpu_step dump SPEC OUTDIR [--device cuda|cpu] [KEY=VALUE ...]
 *
 * Initialises the parameters from train.seed, draws step 1's micro-batches from the recipe's data,
 * runs every micro-batch's forward and backward (no clipping, no optimizer) and writes
 *   OUTDIR/weights.safetensors  every parameter by its name (layers.0.self_attention.linear_qkv.weight),
 *                               F32: on cuda the fp32 master weights (the compute copy is their bf16
 *                               rounding), on cpu the fp32 parameters themselves
 *   OUTDIR/grads.safetensors    every parameter's fp32 main gradient (stepc's `NAME.main_grad`),
 *                               stored under the parameter's NAME, summed over the micro-batches as
 *                               the step leaves it before the norm, clipping and AdamW: the gradient
 *                               of the mean of the micro-batch losses
 *   OUTDIR/batch.safetensors    I32 tokens and targets, (num_microbatches, micro_batch_size, seq)
 *   OUTDIR/batches.safetensors  I32 tokens and targets of steps 1..N, (N, num_microbatches,
 *                               micro_batch_size, seq), drawn by the same CpuData.fill(step, micro)
 *                               that `stepc run` feeds both executors from (runtime/cpu/data.c), so
 *                               that tests/gpu/torch_train_ref.py trains on the very batches stepc
 *                               saw without re-implementing the sampler; N = train.train_iters, cut
 *                               to what fits in BATCHES_MAX_BYTES (meta.json's batch_steps says N)
 *   OUTDIR/meta.json            the losses per micro-batch, the model's shape fields, the
 *                               optimizer's and the LR schedule's fields and the data source
 * Exit 0 written, 1 failure, 77 no GPU (device cuda). The recipe must be dropout-free and without
 * MoE input jitter (PyTorch cannot draw stepc's random draws); MLA and MoE shape fields go to
 * meta.json for torch_model.py's MLA / MoE blocks. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lower/lower.h"
#include "lower/lower_blocks.h"
#include "runtime/cpu/exec.h"
#include "cli/cpu_train.h"
#include "trainer.h"
#include "runtime/safetensors.h"

#define SKIP 77
/* tokens + targets of every dumped step: 200 steps of tiny take 0.8 MB; a recipe with a long
 * train_iters and long sequences is cut at 64 MiB rather than filling the disk */
#define BATCHES_MAX_BYTES (64ll << 20)

/* Where tensor values come from: the CPU executor or the GPU trainer. */
typedef struct {
  const Graph *g;
  CpuExec *cpu;
  RtTrainer *gpu;
} Src;

static int src_read(Src *s, int t, double *out) {
  if (s->gpu) return rt_trainer_read(s->gpu, t, out) ? -1 : 0;
  int64_t n = tensor_numel(&s->g->t[t]);
  for (int64_t i = 0; i < n; i++) out[i] = cpu_exec_get(s->cpu, t, i);
  return 0;
}

/* The tensor that holds a param's fp32 value: its master copy where it has one (bf16 params on
 * cuda), else itself. */
static int value_of(const Graph *g, int p) {
  char name[IR_NAME_MAX + 8];
  snprintf(name, sizeof name, "%s.master", g->t[p].name);
  int m = graph_find_tensor(g, name);
  return m >= 0 ? m : p;
}

/* Writes one F32 safetensors file with every param's value (grads 0) or main gradient (grads 1). */
static int write_params(Src *s, const char *path, int grads, char *err, size_t nerr) {
  const Graph *g = s->g;
  int n = 0;
  for (int i = 0; i < g->nt; i++) n += g->t[i].role == ROLE_PARAM;
  StEntry *e = calloc((size_t)(n ? n : 1), sizeof *e);
  int *src = calloc((size_t)(n ? n : 1), sizeof *src);
  if (!e || !src) return free(e), free(src), snprintf(err, nerr, "out of memory"), -1;
  int k = 0;
  for (int i = 0; i < g->nt; i++) {
    if (g->t[i].role != ROLE_PARAM) continue;
    int from = -1;
    if (grads) {
      for (int j = 0; j < g->nt && from < 0; j++)
        if (g->t[j].role == ROLE_GRAD && g->t[j].of == i) from = j;
    } else
      from = value_of(g, i);
    if (from < 0) return free(e), free(src), snprintf(err, nerr, "%s has no main gradient", g->t[i].name), -1;
    snprintf(e[k].name, sizeof e[k].name, "%s", g->t[i].name);
    snprintf(e[k].dtype, sizeof e[k].dtype, "F32");
    e[k].ndim = g->t[i].ndim;
    for (int d = 0; d < e[k].ndim; d++) e[k].shape[d] = g->t[i].shape[d];
    src[k++] = from;
  }
  char meta_v[32];
  snprintf(meta_v, sizeof meta_v, "%s", grads ? "main_grads" : "weights");
  const char *meta[4] = {"format", "stepc-torch-ref", "content", meta_v};
  StWriter w;
  if (st_write_begin(&w, path, e, n, meta, 2, err, nerr)) return free(e), free(src), -1;
  int rc = 0;
  for (int j = 0; j < n && !rc; j++) {
    int64_t m = st_numel(&e[j]);
    double *d = malloc((size_t)m * sizeof *d);
    float *f = malloc((size_t)m * sizeof *f);
    if (!d || !f || src_read(s, src[j], d)) rc = -1, snprintf(err, nerr, "reading %s failed", g->t[src[j]].name);
    for (int64_t q = 0; q < m && !rc; q++) f[q] = (float)d[q];
    if (!rc && st_write_next(&w, f, err, nerr)) rc = -1;
    free(d), free(f);
  }
  if (rc) st_write_abort(&w);
  else rc = st_write_end(&w, err, nerr);
  free(e), free(src);
  return rc;
}

static int write_batch(const char *path, const int32_t *tok, const int32_t *tgt, int nmb, int64_t b, int64_t t, char *err,
                       size_t nerr) {
  StEntry e[2] = {{.name = "tokens", .dtype = "I32", .ndim = 3, .shape = {nmb, b, t}},
                  {.name = "targets", .dtype = "I32", .ndim = 3, .shape = {nmb, b, t}}};
  const char *meta[2] = {"format", "stepc-torch-ref"};
  StWriter w;
  if (st_write_begin(&w, path, e, 2, meta, 1, err, nerr)) return -1;
  if (st_write_next(&w, tok, err, nerr) || st_write_next(&w, tgt, err, nerr)) return st_write_abort(&w), -1;
  return st_write_end(&w, err, nerr);
}

/* Steps 1..nsteps of the recipe's data, (nsteps, nmb, b, t) each for tokens and targets. */
static int write_batches(const char *path, CpuData *data, int64_t nsteps, int nmb, int64_t b, int64_t t, char *err,
                         size_t nerr) {
  int64_t per = (int64_t)nmb * b * t, n = nsteps * per;
  int32_t *tok = malloc((size_t)n * sizeof *tok), *tgt = malloc((size_t)n * sizeof *tgt);
  if (!tok || !tgt) {
    free(tok), free(tgt);
    return snprintf(err, nerr, "out of memory for %lld steps of batches", (long long)nsteps), -1;
  }
  for (int64_t st = 0; st < nsteps; st++)
    for (int mb = 0; mb < nmb; mb++) {
      int64_t o = st * per + mb * b * t;
      if (data->fill(data, st + 1, mb, b, t, tok + o, tgt + o)) {
        free(tok), free(tgt);
        return snprintf(err, nerr, "the data source failed at step %lld micro-batch %d", (long long)st + 1, mb), -1;
      }
    }
  StEntry e[2] = {{.name = "tokens", .dtype = "I32", .ndim = 4, .shape = {nsteps, nmb, b, t}},
                  {.name = "targets", .dtype = "I32", .ndim = 4, .shape = {nsteps, nmb, b, t}}};
  const char *meta[4] = {"format", "stepc-torch-ref", "content", "batches of steps 1..N"};
  StWriter w;
  int rc = st_write_begin(&w, path, e, 2, meta, 2, err, nerr);
  if (!rc && (st_write_next(&w, tok, err, nerr) || st_write_next(&w, tgt, err, nerr))) st_write_abort(&w), rc = -1;
  else if (!rc) rc = st_write_end(&w, err, nerr);
  free(tok), free(tgt);
  return rc;
}

/* s as a JSON string body (quotes, backslashes and control bytes escaped). */
static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
    else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
    else fputc(*c, f);
  }
  fputc('"', f);
}

/* MLA's and MoE's shape fields (torch_model.py's MLA / MoE blocks); null where the spec has none. */
static void write_meta_mla_moe(FILE *f, const Spec *s) {
  const SpecModel *m = &s->model;
  fprintf(f, "  \"multi_latent_attention\": %s,\n  \"q_lora_rank\": ", m->multi_latent_attention ? "true" : "false");
  if (s->present[SPEC_F_model_q_lora_rank]) fprintf(f, "%lld,\n", (long long)m->q_lora_rank);
  else fprintf(f, "null,\n");
  fprintf(f, "  \"kv_lora_rank\": %lld,\n  \"qk_head_dim\": %lld,\n  \"qk_pos_emb_head_dim\": %lld,\n  \"v_head_dim\": %lld,\n",
          (long long)m->kv_lora_rank, (long long)m->qk_head_dim, (long long)m->qk_pos_emb_head_dim, (long long)m->v_head_dim);
  fprintf(f, "  \"moe_layers\": [");
  for (int l = 0; l < m->num_layers; l++) fprintf(f, "%s%s", l ? ", " : "", spec_layer_is_moe(s, l) ? "true" : "false");
  fprintf(f, "],\n");
  if (!s->present[SPEC_F_model_num_moe_experts]) return;
  fprintf(f, "  \"num_moe_experts\": %lld,\n  \"moe_router_topk\": %lld,\n  \"moe_ffn_hidden_size\": %lld,\n",
          (long long)m->num_moe_experts, (long long)m->moe_router_topk, (long long)spec_moe_ffn_hidden_size(s));
  bool shared = s->present[SPEC_F_model_moe_shared_expert_intermediate_size] && m->moe_shared_expert_intermediate_size > 0;
  fprintf(f, "  \"moe_shared_expert_intermediate_size\": %lld,\n", shared ? (long long)m->moe_shared_expert_intermediate_size : 0ll);
  fprintf(f, "  \"moe_aux_loss_coeff\": %.17g,\n  \"moe_expert_capacity_factor\": ", m->moe_aux_loss_coeff);
  if (s->present[SPEC_F_model_moe_expert_capacity_factor]) fprintf(f, "%.17g,\n", m->moe_expert_capacity_factor);
  else fprintf(f, "null,\n");
  /* lower_moe.c: softmax over the top-k logits, drop by position (the earliest tokens) */
  fprintf(f, "  \"moe_pad_expert_input_to_capacity\": %s,\n  \"moe_router_score_function\": \"softmax\",\n",
          m->moe_pad_expert_input_to_capacity ? "true" : "false");
  fprintf(f, "  \"moe_router_pre_softmax\": false,\n  \"moe_token_drop_policy\": \"position\",\n");
}

/* A hybrid's layer pattern and Mamba-2 mixer sizes (torch_model.py's hybrid blocks): the pattern null
 * where the spec has none; heads as the lowering reads them (lower_mamba_heads), conv kernel 4. */
static void write_meta_hybrid(FILE *f, const Spec *s) {
  const SpecModel *m = &s->model;
  fprintf(f, "  \"hybrid_override_pattern\": ");
  if (s->present[SPEC_F_model_hybrid_override_pattern]) json_str(f, m->hybrid_override_pattern);
  else fprintf(f, "null");
  fprintf(f, ",\n  \"mamba_num_heads\": %lld,\n  \"mamba_head_dim\": %lld,\n  \"mamba_num_groups\": %lld,\n",
          (long long)lower_mamba_heads(s), (long long)m->mamba_head_dim, (long long)m->mamba_num_groups);
  fprintf(f, "  \"mamba_state_dim\": %lld,\n  \"mamba_conv_kernel\": 4,\n", (long long)m->mamba_state_dim);
}

static int write_meta(const char *path, const Spec *s, const Graph *g, const char *device, const double *loss, int nmb,
                      int64_t batch_steps, int text) {
  const SpecModel *m = &s->model;
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int64_t np = 0;
  for (int i = 0; i < g->nt; i++)
    if (g->t[i].role == ROLE_PARAM) np += tensor_numel(&g->t[i]);
  double mean = 0;
  for (int i = 0; i < nmb; i++) mean += loss[i];
  mean /= nmb;
  fprintf(f, "{\n  \"format\": \"stepc-torch-ref\",\n  \"version\": 2,\n  \"device\": \"%s\",\n", device);
  fprintf(f, "  \"compute_dtype\": \"%s\",\n", strcmp(device, "cuda") == 0 && m->bf16 ? "bf16" : "fp32");
  fprintf(f, "  \"seed\": %lld,\n  \"step\": 1,\n  \"parameters\": %lld,\n", (long long)s->train.seed, (long long)np);
  fprintf(f, "  \"num_layers\": %lld,\n  \"hidden_size\": %lld,\n  \"num_attention_heads\": %lld,\n", (long long)m->num_layers,
          (long long)m->hidden_size, (long long)m->num_attention_heads);
  fprintf(f, "  \"num_query_groups\": %lld,\n  \"kv_channels\": %lld,\n  \"ffn_hidden_size\": %lld,\n",
          (long long)spec_num_query_groups(s), (long long)spec_kv_channels(s), (long long)spec_ffn_hidden_size(s));
  fprintf(f, "  \"vocab_size\": %lld,\n  \"seq_length\": %lld,\n  \"micro_batch_size\": %lld,\n  \"num_microbatches\": %d,\n",
          (long long)m->vocab_size, (long long)m->seq_length, (long long)s->train.micro_batch_size, nmb);
  fprintf(f, "  \"layernorm_epsilon\": %.17g,\n  \"rotary_base\": %.17g,\n", m->layernorm_epsilon, m->rotary_base);
  fprintf(f, "  \"rope_scaling_factor\": %.17g,\n", m->rope_scaling ? m->rope_scaling_factor : 0.0); /* 0: none */
  fprintf(f, "  \"normalization\": \"%s\",\n  \"activation_func\": \"%s\",\n  \"gated_linear_unit\": %s,\n", m->normalization,
          m->activation_func, m->gated_linear_unit ? "true" : "false");
  fprintf(f, "  \"add_bias_linear\": %s,\n  \"position_embedding_type\": \"%s\",\n", m->add_bias_linear ? "true" : "false",
          m->position_embedding_type);
  fprintf(f, "  \"share_embeddings_and_output_weights\": %s,\n  \"attention_backend\": \"%s\",\n",
          m->share_embeddings_and_output_weights ? "true" : "false", m->attention_backend);
  write_meta_mla_moe(f, s);
  write_meta_hybrid(f, s);
  const SpecOptimizer *o = &s->optimizer;
  int64_t decay = s->present[SPEC_F_optimizer_lr_decay_iters] ? o->lr_decay_iters : s->train.train_iters;
  fprintf(f, "  \"train_iters\": %lld,\n  \"batch_steps\": %lld,\n  \"data\": %s,\n  \"data_path\": ",
          (long long)s->train.train_iters, (long long)batch_steps, text ? "\"text\"" : "\"mock\"");
  json_str(f, text ? s->data.path : "");
  fprintf(f, ",\n  \"optimizer\": {\"lr\": %.17g, \"min_lr\": %.17g, \"lr_warmup_iters\": %lld, ", o->lr, o->min_lr,
          (long long)o->lr_warmup_iters);
  fprintf(f, "\"lr_decay_iters\": %lld,\n", (long long)decay);
  fprintf(f, "    \"lr_decay_style\": ");
  json_str(f, o->lr_decay_style);
  fprintf(f, ", \"weight_decay\": %.17g, \"adam_beta1\": %.17g, \"adam_beta2\": %.17g,\n", o->weight_decay, o->adam_beta1,
          o->adam_beta2);
  fprintf(f, "    \"adam_eps\": %.17g, \"clip_grad\": %.17g},\n", o->adam_eps, o->clip_grad);
  fprintf(f, "  \"losses\": [");
  for (int i = 0; i < nmb; i++) fprintf(f, "%s%.9g", i ? ", " : "", loss[i]);
  fprintf(f, "],\n  \"loss\": %.9g\n}\n", mean);
  return fclose(f) ? -1 : 0;
}

static int check_recipe(const Spec *s, char *err, size_t nerr) {
  const SpecModel *m = &s->model;
  if (m->hidden_dropout > 0 || m->attention_dropout > 0)
    return snprintf(err, nerr, "dropout is on (hidden %g, attention %g): set model.hidden_dropout=0 model.attention_dropout=0",
                    m->hidden_dropout, m->attention_dropout), -1;
  if (s->present[SPEC_F_model_moe_input_jitter_eps] && m->moe_input_jitter_eps > 0)
    return snprintf(err, nerr, "moe_input_jitter_eps is on: PyTorch cannot draw stepc's jitter"), -1;
  return 0;
}

int cmd_dump(const Spec *s, const char *outdir, int cuda, const char *cache) {
  char err[1024], path[1024];
  if (check_recipe(s, err, sizeof err)) return printf("FAIL dump: %s\n", err), 1;
  if (mkdir(outdir, 0777) && errno != EEXIST) return printf("FAIL cannot create %s: %s\n", outdir, strerror(errno)), 1;
  CpuData data;
  if (cpu_data_open_spec(s, &data, err, sizeof err)) return printf("FAIL %s\n", err), 1;
  Src src = {0};
  RtTrainer *tr = NULL;
  Graph *cg = NULL;
  int code = 1, nmb = 0;
  int32_t *tok = NULL, *tgt = NULL;
  double *loss = NULL;
  int64_t b = s->train.micro_batch_size, t = s->model.seq_length, bt = b * t;
  if (cuda) {
    RtTrainStatus st;
    tr = rt_trainer_new(s, &data, cache, RT_MODE_EAGER, &st, err, sizeof err);
    if (!tr) {
      printf("%s: %s\n", st == RT_TRAIN_NO_DEVICE ? "SKIP" : "FAIL", err);
      code = st == RT_TRAIN_NO_DEVICE ? SKIP : 1;
      goto out;
    }
    src.g = rt_trainer_graph(tr), src.gpu = tr;
  } else {
    if (lower_step(s, &cg, err, sizeof err) != LOWER_OK) {
      printf("FAIL lower: %s\n", err);
      goto out;
    }
    graph_plan_trivial(cg, 4);
    src.g = cg;
    if (!(src.cpu = cpu_exec_new(cg, CPU_F32, 0, err, sizeof err))) {
      printf("FAIL %s\n", err);
      goto out;
    }
    cpu_exec_init_params(src.cpu, (uint64_t)s->train.seed);
  }
  const Graph *g = src.g;
  nmb = g->num_microbatches;
  tok = malloc((size_t)(nmb * bt) * sizeof *tok), tgt = malloc((size_t)(nmb * bt) * sizeof *tgt);
  loss = calloc((size_t)nmb, sizeof *loss);
  if (!tok || !tgt || !loss) goto out;
  for (int mb = 0; mb < nmb; mb++)
    if (data.fill(&data, 1, mb, b, t, tok + mb * bt, tgt + mb * bt)) {
      printf("FAIL data for micro-batch %d\n", mb);
      goto out;
    }
  /* weights before the step (init_params ran at open on cuda; nothing has stepped yet) */
  snprintf(path, sizeof path, "%s/weights.safetensors", outdir);
  if (write_params(&src, path, 0, err, sizeof err)) {
    printf("FAIL %s: %s\n", path, err);
    goto out;
  }
  if (cuda) {
    float gl[256];
    if (nmb > 256 || rt_trainer_stage(tr, 1, err, sizeof err)) {
      printf("FAIL stage: %s\n", nmb > 256 ? "too many micro-batches" : err);
      goto out;
    }
    for (int mb = 0; mb < nmb; mb++)
      if (rt_trainer_enqueue_micro(src.gpu, mb)) {
        printf("FAIL micro %d: %s\n", mb, rt_trainer_device(tr)->err);
        goto out;
      }
    if (rt_trainer_read_losses(src.gpu, gl)) {
      printf("FAIL %s\n", rt_trainer_device(tr)->err);
      goto out;
    }
    for (int mb = 0; mb < nmb; mb++) loss[mb] = gl[mb];
    /* The GPU staged step 1 from the same CpuData (gpu_step grads relies on it too); a batch that
     * differed would show in torch_ref.py as O(1) gradient errors. The input tensors cannot be read
     * back here: their arena range is reused after their last use in the micro-batch. */
  } else {
    for (int mb = 0; mb < nmb; mb++) {
      memcpy(cpu_exec_ptr(src.cpu, g->tokens), tok + mb * bt, (size_t)bt * sizeof *tok);
      memcpy(cpu_exec_ptr(src.cpu, g->targets), tgt + mb * bt, (size_t)bt * sizeof *tgt);
      cpu_exec_set_key(src.cpu, (uint64_t)s->train.seed, 1, mb);
      cpu_exec_run(src.cpu, IR_PHASE_BIT(IR_PHASE_FORWARD) | IR_PHASE_BIT(IR_PHASE_BACKWARD));
      loss[mb] = cpu_exec_get(src.cpu, g->loss, 0);
    }
  }
  snprintf(path, sizeof path, "%s/grads.safetensors", outdir);
  if (write_params(&src, path, 1, err, sizeof err)) {
    printf("FAIL %s: %s\n", path, err);
    goto out;
  }
  snprintf(path, sizeof path, "%s/batch.safetensors", outdir);
  if (write_batch(path, tok, tgt, nmb, b, t, err, sizeof err)) {
    printf("FAIL %s: %s\n", path, err);
    goto out;
  }
  int64_t per_step = 2 * (int64_t)nmb * bt * (int64_t)sizeof(int32_t);
  int64_t fit = BATCHES_MAX_BYTES / per_step;
  int64_t nsteps = s->train.train_iters < fit ? s->train.train_iters : fit;
  if (nsteps < 1) nsteps = 1;
  snprintf(path, sizeof path, "%s/batches.safetensors", outdir);
  if (write_batches(path, &data, nsteps, nmb, b, t, err, sizeof err)) {
    printf("FAIL %s: %s\n", path, err);
    goto out;
  }
  snprintf(path, sizeof path, "%s/meta.json", outdir);
  if (write_meta(path, s, g, cuda ? "cuda" : "cpu", loss, nmb, nsteps, data.text != NULL)) {
    printf("FAIL cannot write %s\n", path);
    goto out;
  }
  double mean = 0;
  for (int mb = 0; mb < nmb; mb++) mean += loss[mb] / nmb;
  printf("PASS dump %s: %d micro-batches, loss %.6f, batches of %lld steps%s, %s\n", cuda ? "cuda" : "cpu", nmb, mean,
         (long long)nsteps, nsteps < s->train.train_iters ? " (train_iters cut to 64 MiB)" : "", outdir);
  code = 0;
out:
  free(tok), free(tgt), free(loss);
  if (src.cpu) cpu_exec_free(src.cpu);
  if (cg) graph_free(cg);
  if (tr) rt_trainer_free(tr);
  if (data.free) data.free(&data);
  return code;
}
