/* main.c — the stepc command line (DESIGN.md §6); the only place that decides exit codes.
 *
 * Exit codes: 0 valid / success, 1 the recipe is invalid (a rule failed), 2 the recipe cannot be
 * loaded, 3 bad command line, 4 an I/O or internal failure. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "codegen/artifact.h"
#include "diag.h"
#include "plan.h"
#include "report.h"
#include "sweep.h"
#include "frontend/frontend.h"
#include "cpu_run.h"
#include "run_artifact.h"
#include "spec.h"
#include "validate.h"

enum { EXIT_OK = 0, EXIT_INVALID = 1, EXIT_LOAD = 2, EXIT_USAGE = 3, EXIT_IO = 4, EXIT_CHECK = 5 };

static const char *const USAGE =
    "usage: stepc VERB SPEC [KEY=VALUE ...] [options]\n"
    "\n"
    "  check  SPEC [KEY=VALUE ...] [--json]   validate a recipe: Megatron's rules (MCORE-n) and stepc's\n"
    "                                         (STEPC-n); exit 0 valid, 1 invalid, 2 cannot load\n"
    "  run    SPEC [KEY=VALUE ...] --device cpu [--steps N] [--json] [--threads N]\n"
    "                                         train on the CPU reference executor, loss per step\n"
    "  run    SPEC [KEY=VALUE ...] [--device cuda] [--steps N] [--json]\n"
    "                                         train on the GPU (eager, or model.cuda_graph_impl=full_iteration:\n"
    "                                         one captured graph per step); loss per step, then step time,\n"
    "                                         tokens/s, TFLOP/s and memory measured beside the plan's; exit 4\n"
    "                                         without a CUDA driver or device\n"
    "  build  SPEC [KEY=VALUE ...] -o DIR [--arch sm_90] [--sms 132]\n"
    "                                         artifact directory: recipe.lua, plan.json, kernels.cu, the cubin,\n"
    "                                         step.c (every launch as literals, grids sized for --sms SMs),\n"
    "                                         libstep.so (runtime/stepc.h) and a train executable; no GPU needed\n"
    "  run    DIR [--device cuda|cpu] [--steps N] [--json]\n"
    "                                         train an artifact through its libstep.so (its compiled step.c)\n"
    "  run    SPEC|DIR ... --nproc N [--comm-timeout S]\n"
    "                                         N data-parallel ranks on this host (the artifact planned with\n"
    "                                         train.world_size=N); under torchrun, mpirun or srun every\n"
    "                                         stepc run is one rank (docs/data-parallel.md)\n"
    "  run    SPEC [KEY=VALUE ...] --device cpu --gradcheck [--json]\n"
    "                                         every parameter's gradient against finite differences\n"
    "                                         (fp64); exit 5 above the tolerance\n"
    "  plan   SPEC [KEY=VALUE ...] [--json] [--svg FILE]\n"
    "                                         memory plan per rank, cost, what each recompute label\n"
    "                                         frees and replays; exit 1 on a graph-scope violation\n"
    "  sweep  SPEC [KEY=VALUE ...] [--candidates '[];core_attn;layernorm,moe_act;full:uniform:1']\n"
    "         [--budget 80GiB] [--json]       the [] control and one candidate at a time\n"
    "  trace  SPEC [KEY=VALUE ...] -o FILE    Chrome/Perfetto trace of the planned step\n"
    "  fields [--markdown]                    every recipe field with its type and default\n"
    "  help                                   this text\n"
    "\n"
    "SPEC is a recipe file (models/llama3_2_1b.lua). KEY=VALUE overrides follow it in the Hydra style:\n"
    "  model.recompute_granularity=selective model.recompute_modules=[core_attn,mlp] model.fp8=null\n"
    "Exit codes: 0 ok, 1 invalid recipe, 2 recipe cannot be loaded, 3 bad command line, 4 I/O or\n"
    "internal error, no CUDA device, or a feature not built yet, 5 a check failed (run --gradcheck).\n";

typedef struct {
  const char *spec;
  const char *overrides[256];
  int noverrides;
  bool json;
  bool markdown;
  const char *device;
  int steps, threads;
  bool gradcheck;
  const char *svg, *out, *candidates, *budget; /* plan --svg, trace/build -o, sweep --candidates/--budget */
  const char *arch;                            /* build --arch */
  int sms;                                     /* build --sms */
  int nproc;                                   /* run --nproc: data-parallel ranks on this host */
  double comm_timeout;                         /* run --comm-timeout SECONDS */
  bool dp_join;                                /* run --dp-join */
} Args;

static int parse_args(int argc, char **argv, Args *a) {
  memset(a, 0, sizeof *a);
  for (int i = 2; i < argc; i++) {
    const char *s = argv[i];
    if (strcmp(s, "--json") == 0) a->json = true;
    else if (strcmp(s, "--markdown") == 0) a->markdown = true;
    else if (strcmp(s, "--gradcheck") == 0) a->gradcheck = true;
    else if ((strcmp(s, "--device") == 0 || strcmp(s, "--steps") == 0 || strcmp(s, "--threads") == 0 || strcmp(s, "--sms") == 0) &&
             i + 1 < argc) {
      const char *v = argv[++i];
      if (s[2] == 'd') a->device = v;
      else if ((s[3] == 'm' ? (a->sms = atoi(v)) : s[2] == 's' ? (a->steps = atoi(v)) : (a->threads = atoi(v))) <= 0 ||
               (s[3] == 'm' && a->sms > 4096)) {
        fprintf(stderr, "stepc: %s wants a positive number%s, not %s\n", s, s[3] == 'm' ? " of SMs (at most 4096)" : "", v);
        return -1;
      }
    }
    else if (strcmp(s, "--arch") == 0 && i + 1 < argc) a->arch = argv[++i];
    else if (strcmp(s, "--dp-join") == 0) a->dp_join = true;
    else if ((strcmp(s, "--nproc") == 0 || strcmp(s, "--comm-timeout") == 0) && i + 1 < argc) {
      const char *v = argv[++i];
      char *end;
      double x = strtod(v, &end);
      if (*end || !(x > 0) || (s[2] == 'n' && (x != (int)x || x > 4096))) {
        fprintf(stderr, "stepc: %s wants a positive %s, not %s\n", s, s[2] == 'n' ? "number of ranks" : "number of seconds", v);
        return -1;
      }
      if (s[2] == 'n') a->nproc = (int)x;
      else a->comm_timeout = x;
    }
    else if ((strcmp(s, "--svg") == 0 || strcmp(s, "-o") == 0 || strcmp(s, "--candidates") == 0 ||
              strcmp(s, "--budget") == 0) && i + 1 < argc) {
      const char *v = argv[++i];
      *(s[1] == 'o' ? &a->out : s[2] == 's' ? &a->svg : s[2] == 'c' ? &a->candidates : &a->budget) = v;
    }
    else if (s[0] == '-' && s[1] == '-') {
      fprintf(stderr, "stepc: unknown option %s\n", s);
      return -1;
    } else if (!a->spec && !strchr(s, '=')) a->spec = s;
    else if (strchr(s, '=')) {
      if (a->noverrides == 256) {
        fprintf(stderr, "stepc: more than 256 overrides\n");
        return -1;
      }
      a->overrides[a->noverrides++] = s;
    } else {
      fprintf(stderr, "stepc: unexpected argument %s (overrides are section.field=value)\n", s);
      return -1;
    }
  }
  return 0;
}

static void print_check_json(const DiagList *d, bool ok) {
  printf("{\"ok\": %s, \"diagnostics\": ", ok ? "true" : "false");
  diag_print_json(d, stdout);
  printf("}\n");
}

/* Loads and validates; returns the exit code and leaves the normalized Spec in *spec. */
static int load_and_check(const Args *a, Spec *spec, DiagList *d) {
  Spec raw;
  if (frontend_load(a->spec, a->overrides, a->noverrides, NULL, &raw, d) != 0) return EXIT_LOAD;
  return validate_spec(&raw, spec, d) ? EXIT_INVALID : EXIT_OK;
}

static int cmd_check(const Args *a) {
  if (!a->spec) {
    fprintf(stderr, "stepc check: missing SPEC (a recipe file such as models/tiny.lua)\n");
    return EXIT_USAGE;
  }
  static Spec spec;
  DiagList d;
  diag_init(&d);
  int rc = load_and_check(a, &spec, &d);
  /* the graph checks run on an invalid recipe too, so that every problem shows at once */
  if (rc != EXIT_LOAD && plan_check(&spec, &d) == PLAN_OK && diag_count(&d, DIAG_ERROR) > 0) rc = EXIT_INVALID;
  if (a->json) {
    print_check_json(&d, rc == EXIT_OK);
  } else {
    diag_print(&d, stderr);
    if (rc == EXIT_OK)
      printf("%s: ok (%d warning%s)\n", a->spec, diag_count(&d, DIAG_WARNING),
             diag_count(&d, DIAG_WARNING) == 1 ? "" : "s");
    else if (rc == EXIT_INVALID)
      printf("%s: invalid (%d error%s)\n", a->spec, diag_count(&d, DIAG_ERROR),
             diag_count(&d, DIAG_ERROR) == 1 ? "" : "s");
    else
      printf("%s: cannot be loaded\n", a->spec);
  }
  diag_free(&d);
  return rc;
}

static int cmd_fields(const Args *a) {
  if (a->markdown) {
    spec_write_reference(stdout);
    return EXIT_OK;
  }
  for (int i = 0; i < SPEC_NFIELDS; i++)
    printf("%-48s %s\n", spec_fields[i].path, spec_fields[i].def);
  return EXIT_OK;
}

static bool is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* stepc run DIR, and SPEC through its cached artifact: the artifact's own libstep.so runs it
 * (run_artifact.c), the path a trainer embeds. */
static int run_dir(const Args *a, const char *dir, bool cuda) {
  if (a->nproc > 1) { /* one process per rank, each this same verb on DIR */
    char steps[32], threads[32], timeout[64];
    char *args[16];
    int n = 0;
    args[n++] = "--device", args[n++] = cuda ? "cuda" : "cpu";
    if (a->steps) snprintf(steps, sizeof steps, "%d", a->steps), args[n++] = "--steps", args[n++] = steps;
    if (a->threads) snprintf(threads, sizeof threads, "%d", a->threads), args[n++] = "--threads", args[n++] = threads;
    if (a->comm_timeout > 0) snprintf(timeout, sizeof timeout, "%.17g", a->comm_timeout), args[n++] = "--comm-timeout", args[n++] = timeout;
    if (a->json) args[n++] = "--json";
    return run_nproc(dir, a->nproc, args, n, stderr);
  }
  ApiRunOptions o = {.steps = a->steps, .json = a->json, .device = cuda ? STEPC_DEVICE_CUDA : STEPC_DEVICE_CPU,
                     .threads = a->threads, .graph_mode = -1, .dp_join = a->dp_join, .comm_timeout_s = a->comm_timeout};
  char err[1024] = "";
  stepc_status st = api_run_artifact(dir, &o, stdout, stderr, err, sizeof err);
  if (st == STEPC_OK) return EXIT_OK;
  fprintf(stderr, "stepc run: %s%s\n", err, st == STEPC_ERR_NO_DEVICE ? " (use --device cpu for the reference executor)" : "");
  return st == STEPC_ERR_RECIPE ? EXIT_LOAD : EXIT_IO;
}

static int cmd_run(const Args *a) {
  if (!a->spec) {
    fprintf(stderr, "stepc run: missing SPEC (a recipe file such as models/tiny.lua, or an artifact directory)\n");
    return EXIT_USAGE;
  }
  bool cuda = !a->device || strcmp(a->device, "cuda") == 0;
  if (!cuda && strcmp(a->device, "cpu") != 0) {
    fprintf(stderr, "stepc run: unknown device '%s' (cpu or cuda)\n", a->device);
    return EXIT_USAGE;
  }
  if (a->threads && cuda) {
    fprintf(stderr, "stepc run: --threads is an option of --device cpu\n");
    return EXIT_USAGE;
  }
  if (is_dir(a->spec)) {
    if (a->gradcheck || a->noverrides) {
      fprintf(stderr, "stepc run: an artifact runs as built (no overrides, no --gradcheck); rebuild it to change the recipe\n");
      return EXIT_USAGE;
    }
    return run_dir(a, a->spec, cuda);
  }
  static Spec raw, spec;
  DiagList d;
  diag_init(&d);
  int rc = EXIT_OK;
  if (frontend_load(a->spec, a->overrides, a->noverrides, NULL, &raw, &d) != 0) rc = EXIT_LOAD;
  else if (validate_spec(&raw, &spec, &d) != 0) rc = EXIT_INVALID;
  if (rc != EXIT_OK) {
    diag_print(&d, stderr);
    diag_free(&d);
    return rc;
  }
  if (a->gradcheck) { /* the CPU oracle in-process: fp64 gradients against finite differences */
    diag_print(&d, stderr);
    diag_free(&d);
    if (cuda && a->device) {
      fprintf(stderr, "stepc run: --gradcheck runs on --device cpu\n");
      return EXIT_USAGE;
    }
    CpuRunOptions o = {.steps = a->steps, .json = a->json, .gradcheck = true, .threads = a->threads};
    char err[512] = "";
    CpuRunStatus st = cpu_run(&spec, &o, stdout, stderr, err, sizeof err);
    if (err[0]) fprintf(stderr, "stepc run: %s\n", err);
    return st == CPU_RUN_OK ? EXIT_OK : st == CPU_RUN_CHECK_FAILED ? EXIT_CHECK : EXIT_IO;
  }
  ArtifactOptions o = {.arch = a->arch, .sm_count = a->sms};
  char dir[4200], err[1024] = "";
  int st = artifact_build_cached(&raw, &spec, &o, &d, stderr, dir, sizeof dir, err, sizeof err);
  diag_print(&d, stderr);
  int nerr_diag = diag_count(&d, DIAG_ERROR);
  diag_free(&d);
  if (st != ARTIFACT_OK) {
    fprintf(stderr, "stepc run: %s\n", err);
    return EXIT_IO;
  }
  if (nerr_diag > 0) {
    fprintf(stderr, "stepc run: the plan breaks the graph-scope rules above\n");
    return EXIT_INVALID;
  }
  return run_dir(a, dir, cuda);
}

/* plan and trace: load, validate, plan; the verb's output; graph-scope errors exit 1. */
static int cmd_plan(const Args *a, bool trace) {
  if (!a->spec || (trace && !a->out)) {
    fprintf(stderr, "stepc %s: missing %s\n", trace ? "trace" : "plan", a->spec ? "-o FILE" : "SPEC");
    return EXIT_USAGE;
  }
  static Spec spec;
  static Plan p;
  DiagList d;
  diag_init(&d);
  int rc = load_and_check(a, &spec, &d);
  if (rc != EXIT_OK) {
    diag_print(&d, stderr);
    diag_free(&d);
    return rc;
  }
  char err[512] = "";
  int st = plan_build(&spec, 0, &p, &d, err, sizeof err);
  if (st != PLAN_OK) {
    diag_print(&d, stderr);
    diag_free(&d);
    fprintf(stderr, "stepc %s: %s\n", trace ? "trace" : "plan", err);
    return EXIT_IO;
  }
  FILE *f = NULL;
  const char *path = trace ? a->out : a->svg;
  if (path && !(f = fopen(path, "w"))) {
    fprintf(stderr, "stepc: cannot write %s\n", path);
    rc = EXIT_IO;
  } else if (f) {
    if ((trace ? report_trace(&p, f) : report_plan_svg(&p, f)) != 0 || fclose(f) != 0) rc = EXIT_IO;
    if (rc != EXIT_OK) fprintf(stderr, "stepc: writing %s failed\n", path);
  }
  if (trace) {
    diag_print(&d, stderr);
    if (rc == EXIT_OK) fprintf(stderr, "%s: wrote %s (open it in ui.perfetto.dev)\n", a->spec, a->out);
  } else if (a->json) {
    report_plan_json(&p, &d, stdout);
  } else {
    report_plan_text(&p, &d, stdout);
  }
  if (rc == EXIT_OK && diag_count(&d, DIAG_ERROR) > 0) rc = EXIT_INVALID;
  plan_free(&p);
  diag_free(&d);
  return rc;
}

/* stepc build SPEC -o DIR: the artifact (compiler/codegen/artifact.h). */
static int cmd_build(const Args *a) {
  if (!a->spec || !a->out) {
    fprintf(stderr, "stepc build: missing %s\n", a->spec ? "-o DIR" : "SPEC");
    return EXIT_USAGE;
  }
  static Spec raw, spec;
  DiagList d;
  diag_init(&d);
  int rc = EXIT_OK;
  if (frontend_load(a->spec, a->overrides, a->noverrides, NULL, &raw, &d) != 0) rc = EXIT_LOAD;
  else if (validate_spec(&raw, &spec, &d) != 0) rc = EXIT_INVALID;
  if (rc != EXIT_OK) {
    diag_print(&d, stderr);
    diag_free(&d);
    return rc;
  }
  ArtifactOptions o = {.dir = a->out, .arch = a->arch, .sm_count = a->sms};
  char err[1024] = "";
  int st = artifact_build_dir(&raw, &spec, &o, &d, stderr, err, sizeof err);
  diag_print(&d, stderr);
  if (st != ARTIFACT_OK) {
    fprintf(stderr, "stepc build: %s\n", err);
    rc = EXIT_IO;
  } else if (diag_count(&d, DIAG_ERROR) > 0) {
    fprintf(stderr, "stepc build: %s was written, but the plan breaks the graph-scope rules above\n", a->out);
    rc = EXIT_INVALID;
  } else {
    printf("%s: step.img kernels.%s.cubin libstep.so train step.c kernels.cu recipe.lua plan.json\n", a->out, a->arch ? a->arch : "sm_90");
  }
  diag_free(&d);
  return rc;
}

static int cmd_sweep(const Args *a) {
  if (!a->spec) {
    fprintf(stderr, "stepc sweep: missing SPEC\n");
    return EXIT_USAGE;
  }
  double budget = 0;
  if (a->budget && (budget = (double)plan_parse_bytes(a->budget)) < 0) {
    fprintf(stderr, "stepc sweep: --budget wants a size such as 80GiB or 141GB, not %s\n", a->budget);
    return EXIT_USAGE;
  }
  DiagList d;
  diag_init(&d);
  SweepRow *rows = NULL;
  int n = 0, cheapest = -1;
  int st = sweep_run(a->spec, a->overrides, a->noverrides, a->candidates, budget, &rows, &n, &cheapest, &d);
  diag_print(&d, stderr);
  diag_free(&d);
  if (st != SWEEP_OK) {
    free(rows);
    return st == SWEEP_LOAD ? EXIT_LOAD : st == SWEEP_INVALID ? EXIT_INVALID : EXIT_IO;
  }
  if (a->json) report_sweep_json(a->spec, rows, n, budget, cheapest, stdout);
  else report_sweep_text(a->spec, rows, n, budget, cheapest, stdout);
  free(rows);
  return EXIT_OK;
}

int main(int argc, char **argv) {
  if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    fputs(USAGE, argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : EXIT_OK;
  }
  Args a;
  if (parse_args(argc, argv, &a) != 0) return EXIT_USAGE;
  const char *verb = argv[1];
  if (strcmp(verb, "check") == 0) return cmd_check(&a);
  if (strcmp(verb, "fields") == 0) return cmd_fields(&a);
  if (strcmp(verb, "run") == 0) return cmd_run(&a);
  if (strcmp(verb, "plan") == 0) return cmd_plan(&a, false);
  if (strcmp(verb, "trace") == 0) return cmd_plan(&a, true);
  if (strcmp(verb, "sweep") == 0) return cmd_sweep(&a);
  if (strcmp(verb, "build") == 0) return cmd_build(&a);
  fprintf(stderr, "stepc: unknown verb '%s'\n\n%s", verb, USAGE);
  return EXIT_USAGE;
}
