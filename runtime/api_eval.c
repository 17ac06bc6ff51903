/* api_eval.c — stepc_eval (stepc.h): a batch's loss and per-token log-probabilities with no update.
 * The backends play the step's forward alone (api_cpu.c: the micro program's forward ops with
 * dropout off; api_cuda.c: the launch program's evaluation section); this file checks the call and
 * what the step allows, and averages the loss as stepc_step does. */
#include <string.h>

#include "runtime/api_internal.h"

int api_eval_refusal(stepc_t *s) {
  const Graph *g = s->g;
  if (graph_lm_loss_op(g) < 0)
    return api_fail(s, STEPC_ERR_UNSUPPORTED, "stepc_eval: the step has no single language-model loss op"),
           -1;
  for (int q = 0; q < s->im.micro_points; q++) {
    const Op *op = &g->op[s->im.point_op[q]];
    if (op->tags.phase != IR_PHASE_FORWARD) continue;
    Op e = *op;
    if (op_for_eval(&e) != 0)
      return api_fail(s, STEPC_ERR_UNSUPPORTED,
                      "stepc_eval: %s (%s) draws random numbers an evaluation cannot turn off",
                      op_name(op->kind), op->tags.module),
             -1;
    for (int i = 0; i < op->nout; i++)
      if (role_is_persistent(g->t[op->out[i]].role))
        return api_fail(s, STEPC_ERR_UNSUPPORTED, "stepc_eval: the forward op %s (%s) writes %s",
                        op_name(op->kind), op->tags.module, g->t[op->out[i]].name),
               -1;
  }
  return 0;
}

void api_eval_logprobs(const float *token_loss, int64_t n, float *lp) {
  for (int64_t i = 0; i < n; i++)
    lp[i] = 0.0f - token_loss[i]; /* an ignored token's 0 stays +0 */
}

stepc_status stepc_eval(stepc_t *s, const int32_t *tokens, const int32_t *targets, size_t count, double *loss,
                        float *logprobs) {
  if (!s || !s->be) return STEPC_ERR_ARGUMENT;
  s->err[0] = 0;
  stepc_status st = api_batch_check(s, "stepc_eval", tokens, targets, count);
  if (st == STEPC_OK) st = api_tokens_check(s, "stepc_eval", tokens, count);
  if (st != STEPC_OK) return st;
  if (api_eval_refusal(s)) return STEPC_ERR_UNSUPPORTED;
  /* the loss is Megatron's mean over the kept targets of the evaluated global batch, as a step's:
   * every rank's kept count summed; a batch with none is refused (nothing runs) */
  int64_t kept = cpu_data_count_kept(targets, (int64_t)count, s->im.f.vocab_size);
  double den = 0, sum = 0, mean = 0;
  st = api_loss_den(s, kept, "stepc_eval", &den);
  if (st != STEPC_OK) return st;
  st = s->be->eval(s, tokens, targets, den, &sum, logprobs);
  if (st != STEPC_OK) {
    if (!s->err[0]) api_fail(s, st, "stepc_eval failed");
    return st;
  }
  if (api_dp_loss(s, sum, &mean)) return STEPC_ERR_RUNTIME; /* every rank's micro-batches, as a step's */
  if (loss) *loss = mean;
  if (!(mean == mean) || mean > 1e300 || mean < -1e300)
    return api_fail(s, STEPC_ERR_RUNTIME, "stepc_eval: the loss is not finite");
  return STEPC_OK;
}
