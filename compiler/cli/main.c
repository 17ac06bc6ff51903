/* main.c — the stepc command line (the grammar in cli.c; README "Command line"); the only place that decides
 * exit codes.
 *
 * Exit codes: 0 valid / success, 1 the recipe is invalid (a rule failed), 2 the recipe cannot be
 * loaded, 3 bad command line, 4 an I/O or internal failure. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/cpu_run.h"
#include "cli/export_hf.h"
#include "cli/hf_config.h"
#include "cli/layout.h"
#include "cli/run_artifact.h"
#include "codegen/artifact.h"
#include "frontend/frontend.h"
#include "frontend/spec.h"
#include "plan/plan.h"
#include "report/report.h"
#include "report/sweep.h"
#include "runtime/image.h"
#include "validate/diag.h"
#include "validate/validate.h"

enum { EXIT_OK = 0, EXIT_INVALID = 1, EXIT_LOAD = 2, EXIT_USAGE = 3, EXIT_IO = 4, EXIT_CHECK = 5 };

static void print_check_json(const DiagList *d, bool ok) {
  printf("{\"schema\": \"stepc.check/1\", \"ok\": %s, \"diagnostics\": ", ok ? "true" : "false");
  diag_print_json(d, stdout);
  printf("}\n");
}

/* Loads and validates; returns the exit code and leaves the normalized Spec in *spec. */
static int load_raw_and_check(const Args *a, Spec *raw, Spec *spec, DiagList *d) {
  FrontendOptions fo = {.models_dir = stepc_models_dir()}; /* the shipped recipes beside this stepc */
  if (frontend_load(a->spec, a->overrides, a->noverrides, &fo, raw, d) != 0) return EXIT_LOAD;
  return validate_spec(raw, spec, d) ? EXIT_INVALID : EXIT_OK;
}

static int load_and_check(const Args *a, Spec *spec, DiagList *d) {
  static Spec raw;
  return load_raw_and_check(a, &raw, spec, d);
}

/* Loads and validates into raw and spec; on failure prints the diagnostics, frees d and returns
 * the exit code. */
static int load_for_build(const Args *a, Spec *raw, Spec *spec, DiagList *d) {
  diag_init(d);
  int rc = load_raw_and_check(a, raw, spec, d);
  if (rc != EXIT_OK) {
    diag_print(d, stderr);
    diag_free(d);
  }
  return rc;
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
  if (rc != EXIT_LOAD && plan_check(&spec, &d) == PLAN_OK && diag_count(&d, DIAG_ERROR) > 0)
    rc = EXIT_INVALID;
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
    char steps[32], threads[32], timeout[64], every[32], tune[32];
    char *args[22];
    int n = 0;
    args[n++] = "--device", args[n++] = cuda ? "cuda" : "cpu";
    if (a->steps) snprintf(steps, sizeof steps, "%d", a->steps), args[n++] = "--steps", args[n++] = steps;
    if (a->threads)
      snprintf(threads, sizeof threads, "%d", a->threads), args[n++] = "--threads", args[n++] = threads;
    if (a->comm_timeout > 0)
      snprintf(timeout, sizeof timeout, "%.17g", a->comm_timeout), args[n++] = "--comm-timeout",
                                                                   args[n++] = timeout;
    if (a->json) args[n++] = "--json";
    if (a->profile) args[n++] = "--profile";
    if (a->timeline) args[n++] = "--timeline", args[n++] = (char *)a->timeline; /* rank 0 writes it */
    if (a->eval_data) args[n++] = "--eval-data", args[n++] = (char *)a->eval_data;
    if (a->eval_every)
      snprintf(every, sizeof every, "%d", a->eval_every), args[n++] = "--eval-every", args[n++] = every;
    if (a->gemm_tuning)
      snprintf(tune, sizeof tune, "%d", a->gemm_tuning), args[n++] = "--gemm-tuning", args[n++] = tune;
    return run_nproc(dir, a->nproc, args, n, stderr);
  }
  ApiRunOptions o = {.steps = a->steps,
                     .json = a->json,
                     .device = cuda ? STEPC_DEVICE_CUDA : STEPC_DEVICE_CPU,
                     .threads = a->threads,
                     .graph_mode = -1,
                     .profile = a->profile,
                     .quiet = a->quiet,
                     .dp_join = a->dp_join,
                     .comm_timeout_s = a->comm_timeout,
                     .timeline = a->timeline,
                     .eval_data = a->eval_data,
                     .eval_every = a->eval_every,
                     .gemm_tuning = a->gemm_tuning};
  char err[1024] = "";
  stepc_status st = api_run_artifact(dir, &o, stdout, stderr, err, sizeof err);
  if (st == STEPC_OK) return EXIT_OK;
  fprintf(stderr, "stepc run: %s%s\n", err,
          st == STEPC_ERR_NO_DEVICE ? " (use --device cpu for the reference executor)" : "");
  return st == STEPC_ERR_RECIPE ? EXIT_LOAD : EXIT_IO;
}

static int cmd_run(const Args *a) {
  if (!a->spec) {
    fprintf(stderr,
            "stepc run: missing SPEC (a recipe file such as models/tiny.lua, or an artifact directory)\n");
    return EXIT_USAGE;
  }
  if (a->timeline && !a->profile) {
    fprintf(stderr, "stepc run: --timeline FILE writes the profiled step's timeline: add --profile\n");
    return EXIT_USAGE;
  }
  if (a->eval_every && !a->eval_data) {
    fprintf(stderr, "stepc run: --eval-every N evaluates a validation batch: add --eval-data PATH\n");
    return EXIT_USAGE;
  }
  if (a->eval_data && a->gradcheck) {
    fprintf(stderr, "stepc run: --eval-data trains and evaluates; --gradcheck checks gradients\n");
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
  if (a->gemm_tuning && !cuda) {
    fprintf(stderr, "stepc run: --gemm-tuning times cuBLASLt's algorithms: an option of --device cuda\n");
    return EXIT_USAGE;
  }
  if (is_dir(a->spec)) {
    if (a->gradcheck || a->noverrides) {
      fprintf(stderr, "stepc run: an artifact runs as built (no overrides, no --gradcheck); rebuild it to "
                      "change the recipe\n");
      return EXIT_USAGE;
    }
    return run_dir(a, a->spec, cuda);
  }
  static Spec raw, spec;
  DiagList d;
  int rc = load_for_build(a, &raw, &spec, &d);
  if (rc != EXIT_OK) return rc;
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
  int svg_rank = REPORT_SVG_SINGLE;
  if (!trace && a->svg_rank && !a->svg) {
    fprintf(stderr, "stepc plan: --svg-rank needs --svg FILE\n");
    rc = EXIT_USAGE;
  } else if (!trace && a->svg && report_svg_rank(&p, a->svg_rank, &svg_rank, err, sizeof err) != 0) {
    fprintf(stderr, "stepc plan: %s\n", err);
    rc = EXIT_USAGE;
  } else if (path && !(f = fopen(path, "w"))) {
    fprintf(stderr, "stepc: cannot write %s\n", path);
    rc = EXIT_IO;
  } else if (f) {
    err[0] = 0;
    if ((trace ? report_trace(&p, f) : report_plan_svg(&p, svg_rank, f, err, sizeof err)) != 0) rc = EXIT_IO;
    if (fclose(f) != 0) rc = EXIT_IO;
    if (rc != EXIT_OK) fprintf(stderr, "stepc: writing %s failed%s%s\n", path, err[0] ? ": " : "", err);
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
  int rc = load_for_build(a, &raw, &spec, &d);
  if (rc != EXIT_OK) return rc;
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
    printf("%s: step.img kernels.%s.cubin libstep.so libstep.sum train program.txt kernels.cu recipe.lua "
           "plan.json\n",
           a->out, a->arch ? a->arch : "sm_90");
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
  size_t bl = a->budget ? strlen(a->budget) : 0;
  if (a->budget && (bl == 0 || (a->budget[bl - 1] >= '0' && a->budget[bl - 1] <= '9') ||
                    (budget = (double)plan_parse_bytes(a->budget)) <= 0)) {
    fprintf(stderr,
            "stepc sweep: --budget wants a size with its unit, such as 80GiB, 141GB or 512MiB, not %s\n",
            a->budget);
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
  if (a->json)
    report_sweep_json(a->spec, rows, n, budget, cheapest, stdout);
  else
    report_sweep_text(a->spec, rows, n, budget, cheapest, stdout);
  free(rows);
  return EXIT_OK;
}

/* stepc export / import: parameters to and from a Hugging Face Llama directory (export_hf.h). */
static int cmd_hf(const Args *a, bool to_hf) {
  if (!to_hf && a->print_recipe) { /* import --print-recipe HF_DIR: a recipe for its config.json */
    if (a->spec || a->from || a->out || a->noverrides) {
      fprintf(stderr, "stepc import: --print-recipe HF_DIR takes no SPEC, overrides, --from or -o (stepc "
                      "import --help)\n");
      return EXIT_USAGE;
    }
    static char recipe[16384];
    char err[1024] = "";
    if (hf_config_recipe(a->print_recipe, recipe, sizeof recipe, err, sizeof err) != 0) {
      fprintf(stderr, "stepc import: %s\n", err);
      return EXIT_IO;
    }
    fputs(recipe, stdout);
    return EXIT_OK;
  }
  if (!a->spec || !a->from || !a->out) {
    fprintf(stderr, "stepc %s: missing %s (stepc %s --help)\n", to_hf ? "export" : "import",
            !a->spec   ? "SPEC"
            : !a->from ? "--from"
                       : "-o",
            to_hf ? "export" : "import");
    return EXIT_USAGE;
  }
  static Spec spec;
  DiagList d;
  diag_init(&d);
  int rc = load_and_check(a, &spec, &d);
  diag_print(&d, stderr);
  diag_free(&d);
  if (rc != EXIT_OK) return rc;
  char err[1024] = "";
  if ((to_hf ? export_hf(&spec, a->from, a->out, err, sizeof err)
             : import_hf(&spec, a->from, a->out, err, sizeof err)) != 0) {
    fprintf(stderr, "stepc %s: %s\n", to_hf ? "export" : "import", err);
    return EXIT_IO;
  }
  char index[1100];
  snprintf(index, sizeof index, "%s/model.safetensors.index.json", a->out);
  printf("%s: %s\n", a->out,
         !to_hf ? "stepc parameters"
         : access(index, F_OK) == 0
             ? "config.json, model.safetensors.index.json and its shards (Hugging Face Llama)"
             : "config.json model.safetensors (Hugging Face Llama)");
  return EXIT_OK;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    cli_help(NULL, stderr);
    return EXIT_USAGE;
  }
  const char *near = NULL, *verb = argv[1];
  if (!strcmp(verb, "--help") || !strcmp(verb, "-h")) verb = "help";
  if (!strcmp(verb, "--version")) verb = "version";
  if (!cli_verb(verb, &near)) {
    fprintf(stderr, "stepc: unknown verb '%s'%s%s%s (stepc help lists them)\n", verb,
            near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "");
    return EXIT_USAGE;
  }
  if (!strcmp(verb, "help")) {
    if (argc > 2 && cli_help(argv[2], stdout) != 0) {
      fprintf(stderr, "stepc help: no verb '%s' (stepc help lists them)\n", argv[2]);
      return EXIT_USAGE;
    }
    if (argc <= 2) cli_help(NULL, stdout);
    return EXIT_OK;
  }
  if (!strcmp(verb, "version")) {
    printf("stepc %s (step image format %d, stepc.h API %d)\n", STEPC_VERSION, STEPC_IMAGE_VERSION,
           STEPC_API_VERSION);
    return EXIT_OK;
  }
  Args a;
  if (cli_parse(argc, argv, &a, stderr) != 0) return EXIT_USAGE;
  if (a.help) {
    cli_help(verb, stdout);
    return EXIT_OK;
  }
  if (a.spec && strcmp(verb, "run") && is_dir(a.spec)) {
    fprintf(stderr, "stepc %s: %s is a directory; SPEC is a recipe file (models/tiny.lua)\n", verb, a.spec);
    return EXIT_USAGE;
  }
  if (strcmp(verb, "check") == 0) return cmd_check(&a);
  if (strcmp(verb, "fields") == 0) return cmd_fields(&a);
  if (strcmp(verb, "run") == 0) return cmd_run(&a);
  if (strcmp(verb, "plan") == 0) return cmd_plan(&a, false);
  if (strcmp(verb, "trace") == 0) return cmd_plan(&a, true);
  if (strcmp(verb, "sweep") == 0) return cmd_sweep(&a);
  if (strcmp(verb, "export") == 0 || strcmp(verb, "import") == 0) return cmd_hf(&a, verb[0] == 'e');
  return cmd_build(&a);
}
