/* ew_gen.c — the generated fused elementwise kernels (compiler/passes/ew_fuse.c, templates/), CPU only:
 * on gpt3_tiny (bf16) the executor fuses the 4 backward residual-gradient ADD -> DROPOUT_BWD
 * chains; their kernels' text is the same on every analysis of the graph, their parameters are
 * the ones ew_fuse.h lists (stored outputs, inputs, n, the dropout's p, seed slot and stream), the
 * dropout value goes through dropout.cuh's dropout_keep (the mask of dropout_backward), and NVRTC
 * compiles kernels.cu with them for sm_90 into a cubin holding every generated symbol. */
#include <stdlib.h>

#include "codegen/cubin/kernel_text.h"
#include "compiler/codegen/cubin/cubin.h"
#include "record_run.h"

typedef RecordRun Run;

static int load(Run *r, const char *recipe, const char **kv, int nkv) {
  return record_run_open(recipe, kv, nkv, &r->p, &r->dev, &r->rec, &r->x);
}

static void unload(Run *r) { record_run_close(&r->p, &r->rec, r->x); }

int main(void) {
  const char *kv[] = {"model.bf16=true"};
  Run a, b;
  if (load(&a, "tests/recipes/gpt3_tiny.lua", kv, 1) || load(&b, "tests/recipes/gpt3_tiny.lua", kv, 1)) return 1;
  const EwKernels *ka = &a.p.ew, *kb = &b.p.ew;
  RtGenKernels ra, none = {0};
  ew_kernels_rt(ka, &ra);
  CHECK(rt_kernel_list_hash(&ra) != rt_kernel_list_hash(&none), "the kernel-list hash ignores the generated kernels");
  /* two kernels: the sum stored (it continues as the residual gradient) and, at the embedding, not */
  CHECK(ka->n == 2, "%d generated kernels, expected 2", ka->n);
  char *ta = ew_kernels_text(ka), *tb = ew_kernels_text(kb);
  CHECK(ta && tb && strcmp(ta, tb) == 0, "the generated text differs between two analyses of one graph");
  CHECK(rt_exec_layout_hash(a.x) == rt_exec_layout_hash(b.x), "layout hash differs");
  int both = 0, one = 0;
  for (int k = 0; k < ka->n; k++) {
    const EwKernel *K = &ka->k[k];
    printf("%s (%s): %s\n", K->name, K->sig, K->key);
    CHECK(!strncmp(K->name, "ew_add_dropout_bwd_", 19), "name %s", K->name);
    CHECK(strstr(K->src, "f32_to_bf16(x0 + x1)") && strstr(K->src, "dropout_keep(w1[k], thr1, scale1, v0)") &&
              strstr(K->src, "dropout_bits(seed1, U1, (unsigned long long)g)"),
          "%s: not residual_add's sum and dropout_backward's mask", K->name);
    if (!strcmp(K->key, "add(x0,x1)!>dropout_bwd(v0)!")) {
      both++;
      CHECK(!strcmp(K->sig, "pppplfpu"), "%s: signature %s", K->name, K->sig);
      CHECK(strstr(K->src, "(bf16* out0, bf16* out1, const bf16* in0, const bf16* in1, long n, float f1, "
                           "const unsigned long long* S1, unsigned U1)") != NULL,
            "%s: parameter list", K->name);
    } else if (!strcmp(K->key, "add(x0,x1)>dropout_bwd(v0)!")) {
      one++;
      CHECK(!strcmp(K->sig, "ppplfpu"), "%s: signature %s", K->name, K->sig);
      CHECK(!strstr(K->src, "out0[i]"), "%s: stores the dropped sum", K->name);
    }
  }
  CHECK(both == 1 && one == 1, "chain keys: %d stored-sum, %d dropped-sum kernels", both, one);
  /* NVRTC: the hand-written kernels + the generated ones, for sm_90 */
  char err[256];
  char *hand = kernel_text_assemble(NULL, 0, err, sizeof err);
  char *src = hand && ta ? malloc(strlen(hand) + strlen(ta) + 1) : NULL;
  if (src) strcat(strcpy(src, hand), ta);
  CHECK(src != NULL, "assembling kernels.cu: %s", err);
  if (src) {
    CubinOptions opt = {.arch = "sm_90", .cache_dir = ""}; /* no cache: compile it now */
    Cubin c;
    char *msg = NULL;
    CubinStatus st = cubin_compile(src, &opt, &c, &msg);
    if (msg) fprintf(stderr, "%s\n", msg);
    free(msg);
    CHECK(st == CUBIN_OK || st == CUBIN_ERR_IO, "NVRTC failed on the generated kernels.cu");
    if (st == CUBIN_OK || st == CUBIN_ERR_IO) {
      for (int k = 0; k < ka->n; k++)
        CHECK(cubin_has_function(c.data, c.size, ka->k[k].name), "the cubin has no %s", ka->k[k].name);
      CHECK(cubin_has_function(c.data, c.size, "dropout_backward"), "the cubin has no dropout_backward");
      cubin_free(&c);
    }
  }
  free(hand), free(src), free(ta), free(tb);
  unload(&a), unload(&b);
  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("ew_gen: ok\n");
  return failures ? 1 : 0;
}
