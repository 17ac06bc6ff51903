/* pipesplit.c — the layer-to-pipeline-stage/virtual-chunk split, restated from Megatron-LM
 * (d98e8a64dd). Everything in stepc that asks which layers a stage or chunk holds (memrank.c's
 * stage of a layer, recompute.c's full-recompute groups per chunk) asks pipe_chunk_layers. */
#include "passes/pipesplit.h"

#include <stdio.h>

void pipe_split_from_spec(const Spec *s, PipeSplit *p) {
  const SpecModel *m = &s->model;
  p->num_layers = (int)m->num_layers;
  p->pp = m->pipeline_model_parallel_size > 0 ? (int)m->pipeline_model_parallel_size : 1;
  p->vpp = s->present[SPEC_F_model_virtual_pipeline_model_parallel_size] &&
                   m->virtual_pipeline_model_parallel_size > 0
               ? (int)m->virtual_pipeline_model_parallel_size
               : 1;
  p->first = s->present[SPEC_F_model_num_layers_in_first_pipeline_stage]
                 ? (int)m->num_layers_in_first_pipeline_stage
                 : -1;
  p->last = s->present[SPEC_F_model_num_layers_in_last_pipeline_stage]
                ? (int)m->num_layers_in_last_pipeline_stage
                : -1;
  p->embed = m->account_for_embedding_in_pipeline_split;
  p->loss = m->account_for_loss_in_pipeline_split;
}

/* The refusals, in Megatron's order: TransformerConfig.__post_init__ ("Uneven PP" and the
 * account_for_* branch, megatron/core/transformer/transformer_config.py), validate_args's
 * divisibility (megatron/training/arguments.py), and the asserts of get_num_layers_to_build
 * (megatron/core/transformer/transformer_block.py), which runs while the model is built: with
 * neither first/last stage sizes nor account_for_*, num_layers must divide over PP and each
 * stage's layers over VPP; Megatron places no remainder. */
const char *pipe_split_check(const PipeSplit *p, char *buf, size_t n) {
  int vpp = p->vpp;
  if (p->first >= 0 || p->last >= 0) {
    if (p->embed || p->loss)
      return snprintf(buf, n,
                      "num_layers_in_first/last_pipeline_stage cannot be set together with "
                      "account_for_embedding/loss_in_pipeline_split"),
             buf;
    int layers = p->num_layers, stages = p->pp;
    const int sizes[2] = {p->first, p->last};
    const char *which[2] = {"first", "last"};
    for (int i = 0; i < 2; i++) {
      if (sizes[i] < 0) continue;
      if (sizes[i] == 0)
        return snprintf(buf, n, "num_layers_in_%s_pipeline_stage must be larger than 0", which[i]), buf;
      if (sizes[i] % vpp)
        return snprintf(buf, n,
                        "the %d layers of the %s pipeline stage are not divisible by "
                        "virtual_pipeline_model_parallel_size=%d",
                        sizes[i], which[i], vpp),
               buf;
      layers -= sizes[i], stages--;
    }
    if ((layers != 0) != (stages != 0))
      return snprintf(buf, n, "%d layers are left for %d middle pipeline stages", layers, stages), buf;
    if (stages && layers % stages)
      return snprintf(buf, n, "the %d middle layers are not divisible by the %d middle pipeline stages",
                      layers, stages),
             buf;
    if (stages && (layers / stages) % vpp)
      return snprintf(buf, n,
                      "the %d layers of each middle pipeline stage are not divisible by "
                      "virtual_pipeline_model_parallel_size=%d",
                      layers / stages, vpp),
             buf;
    return NULL;
  }
  int nl = p->num_layers + p->embed + p->loss;
  const char *plus = p->embed && p->loss ? " (+2 for the embedding and loss)"
                     : p->embed          ? " (+1 for the embedding)"
                     : p->loss           ? " (+1 for the loss)"
                                         : "";
  if (nl % p->pp)
    return snprintf(buf, n, "num_layers=%d%s is not divisible by pipeline_model_parallel_size=%d", nl, plus,
                    p->pp),
           buf;
  if (p->pp > 1 && (nl / p->pp) % vpp)
    return snprintf(buf, n,
                    "the %d layers per pipeline stage%s are not divisible by "
                    "virtual_pipeline_model_parallel_size=%d",
                    nl / p->pp, plus, vpp),
           buf;
  return NULL;
}

/* Megatron's get_num_layers_to_build (megatron/core/transformer/transformer_block.py) for the
 * count and get_transformer_layer_offset (megatron/core/transformer/transformer_layer.py) for the
 * first layer, without a pipeline_model_parallel_layout (stepc has none):
 *   - num_layers_in_first/last_pipeline_stage set: the first (last) stage builds that many layers
 *     and the other stages share the rest evenly; each stage's layers split evenly over its VPP
 *     chunks, and chunk vc of every stage comes after chunk vc-1 of every stage;
 *   - otherwise num_layers (+1 with account_for_embedding_in_pipeline_split, +1 with
 *     account_for_loss_in_pipeline_split) split evenly over PP x VPP chunks, chunk vc of stage s
 *     being the (vc*PP + s)-th; the embedding takes one layer's place in the first chunk of the
 *     first stage and the loss one in the last chunk of the last stage.
 * Only for a split pipe_split_check accepts. */
int pipe_chunk_layers(const PipeSplit *p, int stage, int vc, int *offset) {
  int pp = p->pp, vpp = pp > 1 ? p->vpp : 1;
  bool first_stage = stage == 0, last_stage = stage == pp - 1;
  int count, off;
  if (p->first >= 0 || p->last >= 0) {
    int first = p->first > 0 ? p->first : 0, last = p->last > 0 ? p->last : 0;
    int middle = p->num_layers - first - last;
    int mstages = pp - (p->first >= 0) - (p->last >= 0);
    int per_middle = mstages > 0 ? middle / mstages : 0;
    int per_rank = per_middle;
    if (first_stage && p->first >= 0) per_rank = first;
    if (last_stage && p->last >= 0) per_rank = last;
    count = per_rank / vpp;
    int mrank = p->first >= 0 ? stage - 1 : stage;
    if (vpp > 1) {
      int round = first / vpp + middle / vpp + last / vpp;
      off = vc * round + (first_stage ? 0 : first / vpp + mrank * (mstages > 0 ? middle / vpp / mstages : 0));
    } else {
      off = first_stage ? 0 : mrank * per_middle + first;
    }
  } else {
    int nl = p->num_layers + p->embed + p->loss;
    int per_rank = nl / pp;
    count = per_rank / vpp;
    off = vc * (nl / vpp) + stage * count;
    bool embed_chunk = first_stage && vc == 0, loss_chunk = last_stage && vc == vpp - 1;
    if (p->embed && embed_chunk) count--;
    if (p->loss && loss_chunk) count--;
    if (p->embed && !embed_chunk) off--;
  }
  if (pp == 1) off = 0;
  *offset = off;
  return count;
}

int pipe_layer_stage(const PipeSplit *p, int l) {
  int vpp = p->pp > 1 ? p->vpp : 1;
  for (int st = 0; st < p->pp; st++)
    for (int vc = 0; vc < vpp; vc++) {
      int off, n = pipe_chunk_layers(p, st, vc, &off);
      if (l >= off && l < off + n) return st;
    }
  return 0; /* a layer no chunk builds: only for a split pipe_split_check refuses */
}
