/* record_run.h — what the unit tests that run the CUDA executor on a recording device share
 * (runtime/record.h: no GPU): a variadic CHECK and the planned step with its executor, loaded from
 * a recipe. Include once per test file (it defines static functions and the failure count). */
#ifndef STEPC_TEST_RECORD_RUN_H
#define STEPC_TEST_RECORD_RUN_H

#include <stdio.h>
#include <string.h>

#include "validate/diag.h"
#include "frontend/frontend.h"
#include "codegen/launch/exec.h"
#include "runtime/record.h"
#include "plan/plan.h"
#include "validate/validate.h"

static int failures;
#define CHECK(c, ...)                                      \
  do {                                                     \
    if (!(c)) {                                            \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fputc('\n', stderr);                                 \
      failures++;                                          \
    }                                                      \
  } while (0)

/* A planned step with its executor on a recording device (record_run_open's outputs). */
typedef struct {
  Plan p;
  RtDevice dev;
  RtRecorder rec;
  RtExec *x;
} RecordRun;

static RtGenKernels record_run_gen;

/* The recipe with its overrides, loaded and validated into *spec. 0, or -1 with the diagnostics printed. */
static inline int record_run_spec(const char *recipe, const char **kv, int nkv, Spec *spec) {
  Spec raw;
  DiagList d;
  diag_init(&d);
  if (frontend_load(recipe, kv, nkv, NULL, &raw, &d) != 0 || validate_spec(&raw, spec, &d) != 0) {
    diag_print(&d, stderr);
    diag_free(&d);
    return -1;
  }
  diag_free(&d);
  return 0;
}

/* Plans recipe (with the overrides) as `stepc build` does and builds the executor on a recording
 * device of 132 SMs, the plan's generated kernels after kernel_list.h's. 0, or -1 with the message
 * printed. */
static inline int record_run_open(const char *recipe, const char **kv, int nkv, Plan *p, RtDevice *dev,
                                  RtRecorder *rec, RtExec **x) {
  memset(p, 0, sizeof *p);
  *x = NULL;
  Spec spec;
  if (record_run_spec(recipe, kv, nkv, &spec)) return -1;
  char err[512] = "";
  if (plan_build(&spec, 0, p, NULL, err, sizeof err) != 0) return fprintf(stderr, "%s: %s\n", recipe, err), -1;
  rt_record_open(dev, rec, 132);
  ew_kernels_rt(&p->ew, &record_run_gen);
  dev->gen = &record_run_gen;
  int unsupported = 0;
  *x = rt_exec_new(dev, p->g, p->fz, &unsupported);
  return *x ? 0 : (fprintf(stderr, "%s: %s\n", recipe, dev->err), -1);
}

static inline void record_run_close(Plan *p, RtRecorder *rec, RtExec *x) {
  rt_exec_free(x);
  rt_recorder_free(rec);
  plan_free(p);
}

#endif
