/* cli.c — the command line's grammar (cli.h). */
#include "cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/spec.h"

enum {
  O_JSON = 256,
  O_MARKDOWN,
  O_GRADCHECK,
  O_PROFILE,
  O_DEVICE,
  O_STEPS,
  O_THREADS,
  O_SMS,
  O_ARCH,
  O_SVG,
  O_CANDIDATES,
  O_BUDGET,
  O_NPROC,
  O_COMM_TIMEOUT,
  O_DP_JOIN,
  O_QUIET,
  O_FROM,
  O_TIMELINE,
  O_SVG_RANK,
  O_PRINT_RECIPE,
  O_EVAL_EVERY,
  O_EVAL_DATA,
  O_GEMM_TUNING,
  O_OUT = 'o',
  O_HELP = 'h'
};

typedef struct {
  const char *name;
  int has_arg, id;
} Opt;

static const Opt OPTS[] = {
    {"json", no_argument, O_JSON},
    {"markdown", no_argument, O_MARKDOWN},
    {"gradcheck", no_argument, O_GRADCHECK},
    {"profile", no_argument, O_PROFILE},
    {"device", required_argument, O_DEVICE},
    {"steps", required_argument, O_STEPS},
    {"threads", required_argument, O_THREADS},
    {"sms", required_argument, O_SMS},
    {"arch", required_argument, O_ARCH},
    {"svg", required_argument, O_SVG},
    {"candidates", required_argument, O_CANDIDATES},
    {"budget", required_argument, O_BUDGET},
    {"nproc", required_argument, O_NPROC},
    {"comm-timeout", required_argument, O_COMM_TIMEOUT},
    {"dp-join", no_argument, O_DP_JOIN},
    {"out", required_argument, O_OUT},
    {"help", no_argument, O_HELP},
    {"quiet", no_argument, O_QUIET},
    {"from", required_argument, O_FROM},
    {"timeline", required_argument, O_TIMELINE},
    {"svg-rank", required_argument, O_SVG_RANK},
    {"print-recipe", required_argument, O_PRINT_RECIPE},
    {"eval-every", required_argument, O_EVAL_EVERY},
    {"eval-data", required_argument, O_EVAL_DATA},
    {"gemm-tuning", required_argument, O_GEMM_TUNING},
};
#define NOPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

typedef struct {
  const char *name;
  int opts[16]; /* option ids this verb takes (O_HELP always) */
  const char *help;
} Verb;

static const Verb VERBS[] = {
    {"check",
     {O_JSON},
     "usage: stepc check SPEC [KEY=VALUE ...] [--json]\n"
     "  Validate a recipe: Megatron's rules (MCORE-n), stepc's (STEPC-n) and the graph checks (checkpoint\n"
     "  regions against CUDA-graph scopes). Exit 0 valid (warnings allowed), 1 invalid, 2 cannot load.\n"},
    {"plan",
     {O_JSON, O_SVG, O_SVG_RANK},
     "usage: stepc plan SPEC [KEY=VALUE ...] [--json] [--svg FILE [--svg-rank worst|single|STAGE]]\n"
     "  The memory plan per rank, the predicted step time (the H200 cost model), what each recompute\n"
     "  label frees and replays. --svg FILE draws live memory over the step: of the worst rank that the\n"
     "  per-rank table shows (a one-GPU layout: the single-rank plan by role); --svg-rank draws the\n"
     "  single-rank plan (single) or the rank of a pipeline stage the table shows (STAGE). Exit 1 on a\n"
     "  graph-scope violation.\n"},
    {"sweep",
     {O_JSON, O_CANDIDATES, O_BUDGET},
     "usage: stepc sweep SPEC [KEY=VALUE ...] [--candidates "
     "'[];core_attn;layernorm,moe_act;full:uniform:1']\n"
     "                   [--budget SIZE] [--json]\n"
     "  The [] control, then one candidate at a time: predicted peak, its delta, replay FLOPs and step\n"
     "  time. SIZE takes a unit: 80GiB, 141GB, 512MiB.\n"},
    {"trace",
     {O_OUT},
     "usage: stepc trace SPEC [KEY=VALUE ...] -o FILE\n"
     "  A Chrome / Perfetto trace of the planned step (ops, scopes, replays, live memory).\n"},
    {"build",
     {O_OUT, O_ARCH, O_SMS},
     "usage: stepc build SPEC [KEY=VALUE ...] -o DIR [--arch sm_90] [--sms 132]\n"
     "  The artifact directory, no GPU needed: step.img (the plan and its launch program, grids and\n"
     "  scratch for --sms SMs), the cubin, program.txt (the program listed), libstep.so\n"
     "  (runtime/stepc.h) and train. Built beside DIR and swapped in;\n"
     "  a DIR holding files that are not an artifact is refused.\n"},
    {"run",
     {O_DEVICE, O_STEPS, O_JSON, O_THREADS, O_GRADCHECK, O_PROFILE, O_ARCH, O_SMS, O_NPROC, O_COMM_TIMEOUT,
      O_DP_JOIN, O_QUIET, O_TIMELINE, O_EVAL_EVERY, O_EVAL_DATA, O_GEMM_TUNING},
     "usage: stepc run SPEC [KEY=VALUE ...] [--device cuda|cpu] [--steps N] [--json | --quiet] [--threads "
     "N]\n"
     "                 [--profile [--timeline FILE]] [--eval-data PATH [--eval-every N]]\n"
     "       stepc run DIR [--device cuda|cpu] [--steps N] [--json] [--profile [--timeline FILE]]\n"
     "       stepc run SPEC [KEY=VALUE ...] --device cpu --gradcheck [--json]\n"
     "       stepc run SPEC|DIR ... --nproc N [--comm-timeout S]\n"
     "       stepc run SPEC|DIR ... --device cuda --gemm-tuning N\n"
     "  Train: SPEC is built into the artifact cache ($STEPC_CACHE_DIR, else ~/.cache/stepc), DIR is an\n"
     "  artifact; either runs through the artifact's libstep.so. Each step prints its loss, LR, grad\n"
     "  norm, time, tokens/s and the time left (--quiet: one line at the end). --profile adds one step "
     "profiled\n"
     "  eagerly, by op class beside the cost model, and a line on the communication stream (its bucket\n"
     "  collectives and how much of them ran beside compute); --timeline FILE writes that step's measured\n"
     "  timeline as a Chrome / Perfetto trace (a track per stream). --gradcheck checks every gradient "
     "against finite\n"
     "  differences in fp64 (exit 5 above the tolerance). --nproc N runs N ranks (data- and tensor-parallel) "
     "on this\n"
     "  host (docs/data-parallel.md). --eval-data PATH evaluates a validation batch of PATH's bytes\n"
     "  (stepc_eval: no update, dropout off) every N steps (--eval-every N; default: after the last step)\n"
     "  and prints its loss beside the training loss (--json: \"eval_loss\" in those steps).\n"
     "  --gemm-tuning N (2 to 16) times cuBLASLt's first N algorithms for each GEMM shape at open and keeps\n"
     "  the fastest (stepc_options.gemm_tuning: two such runs may differ in their bits).\n"
     "  Exit 4 without a CUDA driver or device for --device cuda.\n"},
    {"export",
     {O_FROM, O_OUT},
     "usage: stepc export SPEC [KEY=VALUE ...] --from PARAMS|CHECKPOINT -o DIR\n"
     "  A Hugging Face Llama directory (config.json and model.safetensors with HF's names and layout;\n"
     "  above 5 GB, shards model-0000i-of-0000N.safetensors with model.safetensors.index.json, as HF\n"
     "  writes them) from stepc's parameters (stepc_save_params' file, or a checkpoint directory), for\n"
     "  Llama-style recipes.\n"},
    {"import",
     {O_FROM, O_OUT, O_PRINT_RECIPE},
     "usage: stepc import SPEC [KEY=VALUE ...] --from HF_DIR -o PARAMS.safetensors\n"
     "       stepc import --print-recipe HF_DIR\n"
     "  stepc's parameters file (stepc_load_params, Step.load_params) from a Hugging Face Llama\n"
     "  directory (model.safetensors or the shards of model.safetensors.index.json) whose config.json\n"
     "  is the recipe's model. --print-recipe writes a recipe for HF_DIR's config.json to stdout: the\n"
     "  import with it passes that check (save it, then import with it).\n"},
    {"fields",
     {O_MARKDOWN},
     "usage: stepc fields [--markdown]\n"
     "  Every recipe field with its type and default (--markdown: the reference table).\n"},
    {"help", {0}, "usage: stepc help [VERB]\n"},
    {"version", {0}, "usage: stepc version   (or stepc --version)\n"},
};
#define NVERBS ((int)(sizeof VERBS / sizeof VERBS[0]))

static const char *const OVERVIEW =
    "usage: stepc VERB SPEC [KEY=VALUE ...] [options]      (stepc help VERB, stepc VERB --help)\n"
    "\n"
    "  check   validate a recipe against Megatron's rules and stepc's\n"
    "  plan    memory plan per rank, predicted step time, what each recompute label frees\n"
    "  sweep   the [] control and one recompute candidate at a time\n"
    "  trace   Perfetto trace of the planned step\n"
    "  build   the artifact: a compiled step a trainer loads (libstep.so, runtime/stepc.h)\n"
    "  export  stepc's parameters as a Hugging Face Llama directory (import: the reverse)\n"
    "  run     train: a recipe through its cached artifact, or an artifact directory\n"
    "  fields  every recipe field\n"
    "  version\n"
    "\n"
    "SPEC is a recipe file (models/llama3_2_1b.lua). KEY=VALUE overrides follow it in the Hydra style:\n"
    "  model.recompute_granularity=selective model.recompute_modules=[core_attn,mlp] model.fp8=null\n"
    "Exit codes: 0 ok, 1 invalid recipe, 2 recipe cannot be loaded, 3 bad command line, 4 I/O or\n"
    "internal error, no CUDA device, or a feature not built yet, 5 a check failed (run --gradcheck).\n";

const char *cli_verb(const char *s, const char **near) {
  size_t best = 3;
  if (near) *near = NULL;
  for (int v = 0; v < NVERBS; v++) {
    if (!strcmp(s, VERBS[v].name)) return VERBS[v].name;
    size_t d = spec_edit_distance(s, VERBS[v].name);
    if (near && d < best) best = d, *near = VERBS[v].name;
  }
  return NULL;
}

static const Verb *verb_of(const char *name) {
  for (int v = 0; v < NVERBS; v++)
    if (!strcmp(name, VERBS[v].name)) return &VERBS[v];
  return NULL;
}

int cli_help(const char *verb, FILE *f) {
  if (!verb) return fputs(OVERVIEW, f), 0;
  const Verb *v = verb_of(verb);
  if (!v) return -1;
  fputs(v->help, f);
  return 0;
}

static bool takes(const Verb *v, int id) {
  if (id == O_HELP) return true;
  for (int i = 0; i < 16 && v->opts[i]; i++)
    if (v->opts[i] == id) return true;
  return false;
}

static const char *opt_name(int id) {
  for (int i = 0; i < NOPTS; i++)
    if (OPTS[i].id == id) return OPTS[i].name;
  return "?";
}

/* A whole positive number, all of s. */
static int positive(const char *s, long max, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v <= 0 || v > max) return -1;
  *out = v;
  return 0;
}

/* The verbs that take option id, for the message when another verb was given it. */
static void verbs_taking(int id, char *buf, size_t n) {
  buf[0] = 0;
  size_t k = 0;
  for (int v = 0; v < NVERBS; v++)
    if (id != O_HELP && takes(&VERBS[v], id))
      k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%s", k ? ", " : "", VERBS[v].name);
}

int cli_parse(int argc, char **argv, Args *a, FILE *err) {
  memset(a, 0, sizeof *a);
  a->verb = argv[1];
  const Verb *v = verb_of(argv[1]);
  struct option lo[NOPTS + 1];
  for (int i = 0; i < NOPTS; i++)
    lo[i] = (struct option){OPTS[i].name, OPTS[i].has_arg, NULL, OPTS[i].id};
  lo[NOPTS] = (struct option){0, 0, 0, 0};
  opterr = 0;
  optind = 2;
  for (;;) {
    int id = getopt_long(argc, argv, "ho:", lo, NULL);
    if (id == -1) break;
    if (id == '?') {
      const char *given = argv[optind - 1 < argc ? optind - 1 : argc - 1];
      if (optopt == 'o')
        fprintf(err, "stepc %s: -o needs a value\n", a->verb);
      else if (optopt >= 256)
        fprintf(err, "stepc %s: --%s needs a value\n", a->verb, opt_name(optopt));
      else {
        /* an unknown option: the nearest one this verb takes */
        const char *near = NULL, *name = given[0] == '-' ? given + (given[1] == '-' ? 2 : 1) : given;
        char nm[64];
        snprintf(nm, sizeof nm, "%s", name);
        char *eq = strchr(nm, '=');
        if (eq) *eq = 0;
        size_t best = 3;
        for (int i = 0; i < NOPTS; i++) {
          size_t d = spec_edit_distance(nm, OPTS[i].name);
          if (d < best && takes(v, OPTS[i].id)) best = d, near = OPTS[i].name;
        }
        fprintf(err, "stepc %s: unknown option %s%s%s%s (stepc %s --help)\n", a->verb, given,
                near ? "; did you mean --" : "", near ? near : "", near ? "?" : "", a->verb);
      }
      return -1;
    }
    if (!takes(v, id)) {
      char who[128];
      verbs_taking(id, who, sizeof who);
      fprintf(err, "stepc %s: --%s is an option of %s, not of %s (stepc %s --help)\n", a->verb, opt_name(id),
              who, a->verb, a->verb);
      return -1;
    }
    long n = 0;
    switch (id) {
    case O_HELP: a->help = true; break;
    case O_JSON: a->json = true; break;
    case O_MARKDOWN: a->markdown = true; break;
    case O_GRADCHECK: a->gradcheck = true; break;
    case O_PROFILE: a->profile = true; break;
    case O_DP_JOIN: a->dp_join = true; break;
    case O_TIMELINE: a->timeline = optarg; break;
    case O_QUIET: a->quiet = true; break;
    case O_DEVICE:
      if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
        return fprintf(err, "stepc %s: --device is cpu or cuda, not %s\n", a->verb, optarg), -1;
      a->device = optarg;
      break;
    case O_EVAL_DATA: a->eval_data = optarg; break;
    case O_GEMM_TUNING:
      if (positive(optarg, 16, &n) || n < 2)
        return fprintf(err, "stepc %s: --gemm-tuning wants a whole number from 2 to 16, not %s\n", a->verb,
                       optarg),
               -1;
      a->gemm_tuning = (int)n;
      break;
    case O_STEPS:
    case O_THREADS:
    case O_SMS:
    case O_NPROC:
    case O_EVAL_EVERY:
      if (positive(optarg, id == O_SMS || id == O_NPROC ? 4096 : id == O_THREADS ? 1024 : 1L << 30, &n))
        return fprintf(err, "stepc %s: --%s wants a whole positive number%s, not %s\n", a->verb, opt_name(id),
                       id == O_SMS || id == O_NPROC ? " (at most 4096)"
                       : id == O_THREADS            ? " (at most 1024)"
                                                    : " (at most 1073741824)",
                       optarg),
               -1;
      *(id == O_STEPS        ? &a->steps
        : id == O_THREADS    ? &a->threads
        : id == O_SMS        ? &a->sms
        : id == O_EVAL_EVERY ? &a->eval_every
                             : &a->nproc) = (int)n;
      break;
    case O_COMM_TIMEOUT: {
      char *end;
      double x = strtod(optarg, &end);
      if (end == optarg || *end || !(x > 0) || x > 86400)
        return fprintf(err,
                       "stepc %s: --comm-timeout wants seconds (a positive number, at most 86400), not %s\n",
                       a->verb, optarg),
               -1;
      a->comm_timeout = x;
      break;
    }
    case O_ARCH: a->arch = optarg; break;
    case O_SVG: a->svg = optarg; break;
    case O_SVG_RANK: a->svg_rank = optarg; break;
    case O_OUT: a->out = optarg; break;
    case O_CANDIDATES: a->candidates = optarg; break;
    case O_FROM: a->from = optarg; break;
    case O_PRINT_RECIPE: a->print_recipe = optarg; break;
    case O_BUDGET: a->budget = optarg; break;
    }
  }
  for (int i = optind; i < argc; i++) {
    const char *s = argv[i];
    if (strchr(s, '=')) {
      if (a->noverrides == 256) return fprintf(err, "stepc %s: more than 256 overrides\n", a->verb), -1;
      a->overrides[a->noverrides++] = s;
    } else if (!a->spec)
      a->spec = s;
    else
      return fprintf(err, "stepc %s: unexpected argument %s (one SPEC; overrides are section.field=value)\n",
                     a->verb, s),
             -1;
  }
  return 0;
}
