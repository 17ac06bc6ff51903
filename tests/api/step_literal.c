/* step_literal.c — a generated step.c launches exactly what the executor's dispatch launches.
 *
 *   step_literal ARTIFACT_DIR STEP_SO
 *
 * ARTIFACT_DIR is an artifact, STEP_SO its step.c compiled alone into a shared object (`cc -shared
 * -fPIC step.c`; its stepc_gen_* calls resolve against this executable). The artifact's step image
 * (step.img, what the runtime runs) is recorded twice on one recording device (runtime/record.h):
 * once through the executor's dispatch, op by op in program order (the library's loop), once by
 * running step.c's micro program and tail (what libstep.so launches). Every
 * record — kernel, grid, block, shared memory, every argument's bits; every GEMM field; memsets and
 * copies — must be equal, in order. step.c's fingerprint, kernel-list hash and layout hash must be
 * the library's. Exit 0 equal, 1 a difference (the first is printed), 2 bad input. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/exec.h"
#include "runtime/image.h"
#include "runtime/record.h"
#include "runtime/stepc_gen.h"

static RtDevice dev;
static RtRecorder rec;
static RtExec *ex;
static const Graph *graph;
static const int32_t *point_op;
static int next_point, bad_call;

int stepc_gen_op(stepc_gen_ctx *c, int point, int op, int kind) {
  (void)c;
  if (point != next_point || point_op[point] != op || (int)graph->op[op].kind != kind) {
    fprintf(stderr, "step.c calls op %d (kind %d) at point %d; expected op %d at point %d\n", op, kind, point, point_op[next_point],
            next_point);
    bad_call = 1;
    return -1;
  }
  next_point++;
  rec.op = op;
  return 0;
}
unsigned long long stepc_gen_base(stepc_gen_ctx *c, int which) { return (void)c, rt_exec_base(ex, which); }
int stepc_gen_launch(stepc_gen_ctx *c, int kernel, unsigned gx, unsigned gy, unsigned gz, unsigned block, unsigned smem,
                     void **args) {
  (void)c;
  if (kernel < 0 || kernel >= RT_K_COUNT + (dev.gen ? dev.gen->n : 0)) return bad_call = 1, -1;
  return rt_launch(&dev, (RtKernel)kernel, gx, gy, gz, block, smem, args);
}
int stepc_gen_gemm(stepc_gen_ctx *c, const void *gemm, unsigned long size) {
  (void)c;
  if (size != sizeof(RtGemm)) return bad_call = 1, -1;
  RtGemm g;
  memcpy(&g, gemm, sizeof g);
  return rt_gemm_run(&dev, &g);
}
int stepc_gen_sdpa(stepc_gen_ctx *c, const void *sdpa, unsigned long size) {
  (void)c;
  if (size != sizeof(RtSdpa)) return bad_call = 1, -1;
  RtSdpa s;
  memcpy(&s, sdpa, sizeof s);
  return rt_sdpa_run(&dev, &s);
}
int stepc_gen_memset(stepc_gen_ctx *c, unsigned long long p, unsigned long long n) { return (void)c, rt_memset0(&dev, p, n); }
int stepc_gen_copy(stepc_gen_ctx *c, unsigned long long d, unsigned long long s, unsigned long long n) {
  return (void)c, rt_copy_d2d(&dev, d, s, n);
}

static void describe(const RtRec *r) {
  if (r->kind == RT_REC_LAUNCH) fprintf(stderr, "launch %s grid (%u,%u,%u) block %u", rt_kname(&dev, r->k), r->grid[0], r->grid[1], r->grid[2], r->block);
  else if (r->kind == RT_REC_GEMM) fprintf(stderr, "gemm kind %lld m %lld n %lld k %lld", (long long)r->gemm.kind, (long long)r->gemm.m, (long long)r->gemm.n, (long long)r->gemm.k);
  else if (r->kind == RT_REC_SDPA) fprintf(stderr, "sdpa %s b %lld t %lld h %lld", r->sdpa.bwd ? "bwd" : "fwd", (long long)r->sdpa.b, (long long)r->sdpa.t, (long long)r->sdpa.h);
  else fprintf(stderr, "%s of %llu bytes", r->kind == RT_REC_MEMSET ? "memset" : "copy", (unsigned long long)r->bytes);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: step_literal ARTIFACT_DIR STEP_SO\n");
    return 2;
  }
  void *so = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  const stepc_generated *gen = so ? dlsym(so, "stepc_generated_step") : NULL;
  if (!gen) {
    fprintf(stderr, "%s: %s\n", argv[2], so ? "no stepc_generated_step" : dlerror());
    return 2;
  }
  StepImage im;
  char path[1200], err[1400] = "";
  snprintf(path, sizeof path, "%s/%s", argv[1], STEPC_IMAGE_FILE);
  if (image_read(path, &im, err, sizeof err) != 0) {
    fprintf(stderr, "%s\n", err);
    dlclose(so);
    return 2;
  }
  graph = im.g;
  int rc = 1;
  rt_record_open(&dev, &rec, gen->sm_count);
  dev.gen = &im.gen;
  int unsupported = 0;
  ex = rt_exec_new(&dev, im.g, &unsupported);
  point_op = im.point_op;
  int npt = im.npoints;
  if (gen->abi != STEPC_GEN_ABI || gen->fingerprint != im.f.fingerprint || gen->runtime_hash != rt_kernel_list_hash(&im.gen) ||
      gen->points != npt || gen->micro_points != im.micro_points) {
    fprintf(stderr, "step.c's header differs: abi %d, fingerprint %016llx vs %016llx, runtime hash %016llx vs %016llx, points %d vs %d\n",
            gen->abi, gen->fingerprint, (unsigned long long)im.f.fingerprint, gen->runtime_hash,
            (unsigned long long)rt_kernel_list_hash(&im.gen), gen->points, npt);
    goto out;
  }
  if (!ex) { /* not a CUDA step: step.c must say so and hold no work */
    rec.on = 1;
    for (next_point = 0; next_point < npt && !bad_call;) gen->point[next_point](NULL);
    rc = gen->layout == 0 && rec.n == 0 && !bad_call ? 0 : 1;
    printf("%s: not run on CUDA (%s); step.c: %d points, %s\n", argv[1], dev.err, npt, rc ? "FAIL: it holds CUDA work" : "no CUDA work, ok");
    goto out;
  }
  if (gen->layout != rt_exec_layout_hash(ex)) {
    fprintf(stderr, "step.c's layout %016llx, the executor's %016llx\n", gen->layout, (unsigned long long)rt_exec_layout_hash(ex));
    goto out;
  }
  /* 1: the dispatch, in program order */
  rec.on = 1;
  for (int q = 0; q < npt; q++) {
    rec.op = point_op[q];
    if (rt_exec_run_op(ex, point_op[q])) {
      fprintf(stderr, "dispatch: %s\n", dev.err);
      goto out;
    }
  }
  int na = rec.n;
  RtRec *a = malloc((size_t)(na ? na : 1) * sizeof *a);
  memcpy(a, rec.r, (size_t)na * sizeof *a);
  rec.n = 0;
  /* 2: step.c */
  next_point = 0;
  if (gen->micro((stepc_gen_ctx *)&dev) || next_point != gen->micro_points || gen->tail((stepc_gen_ctx *)&dev) || next_point != npt) {
    fprintf(stderr, "step.c stopped at point %d of %d: %s\n", next_point, npt, dev.err);
    free(a);
    goto out;
  }
  int n = na < rec.n ? na : rec.n, i = 0;
  while (i < n && rt_record_equal(&a[i], &rec.r[i]) && a[i].op == rec.r[i].op) i++;
  if (i < n || na != rec.n) {
    fprintf(stderr, "record %d differs (dispatch %d records, step.c %d)", i, na, rec.n);
    if (i < n) {
      fprintf(stderr, ": op %d dispatch ", a[i].op);
      describe(&a[i]);
      fprintf(stderr, " / op %d step.c ", rec.r[i].op);
      describe(&rec.r[i]);
    }
    fprintf(stderr, "\n");
  } else {
    int nl = 0, ng = 0;
    for (int k = 0; k < na; k++) nl += a[k].kind == RT_REC_LAUNCH, ng += a[k].kind == RT_REC_GEMM;
    printf("%s: step.c = dispatch: %d points, %d records (%d launches, %d GEMMs), every argument equal\n", argv[1], npt, na, nl, ng);
    rc = 0;
  }
  free(a);
out:
  rt_exec_free(ex);
  rt_recorder_free(&rec);
  image_free(&im);
  dlclose(so);
  return rc;
}
