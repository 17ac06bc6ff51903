/* cli.h — the command line's grammar: verbs, each verb's options and help, strict parsing
 * (getopt_long: `--steps 3` and `--steps=3`; numbers must be whole numbers; an option of another
 * verb is an error that names its verb; a misspelled verb or option gets a did-you-mean). main.c
 * runs the verbs and decides the exit codes. */
#ifndef STEPC_CLI_H
#define STEPC_CLI_H

#include <stdbool.h>
#include <stdio.h>

#define STEPC_VERSION "0.9.0"

typedef struct {
  const char *verb;
  const char *spec;
  const char *overrides[256];
  int noverrides;
  bool json, markdown, gradcheck, profile, help, quiet;
  const char *device;
  int steps, threads, sms;
  const char *svg, *out, *candidates, *budget, *arch, *from;
  int nproc;                /* run --nproc: data-parallel ranks on this host */
  double comm_timeout;      /* run --comm-timeout SECONDS */
  bool dp_join;             /* run --dp-join */
  const char *timeline;     /* run --timeline FILE (with --profile) */
  const char *eval_data;    /* run --eval-data PATH: the validation text */
  int eval_every;           /* run --eval-every N (with --eval-data) */
  int gemm_tuning;          /* run --gemm-tuning N: stepc_options.gemm_tuning */
  const char *svg_rank;     /* plan --svg-rank worst|single|STAGE (with --svg) */
  const char *print_recipe; /* import --print-recipe HF_DIR */
} Args;

/* The verb's help (NULL verb: the overview) to f. 0, or -1 for an unknown verb. */
int cli_help(const char *verb, FILE *f);
/* argv[1] is the verb. 0 parsed (a->help set when --help/-h was given), -1 with the message on err. */
int cli_parse(int argc, char **argv, Args *a, FILE *err);
/* A known verb's canonical name, or NULL; *near receives the closest verb when it is near. */
const char *cli_verb(const char *s, const char **near);

#endif
