/* test_dp.c — data parallel on the CPU device, ranks as threads of this process (each its own
 * stepc handle, joined over TCP on 127.0.0.1 like separate processes). tests/api/dp.sh builds the
 * artifacts and runs each mode:
 *
 *   test_dp equal  ARTA NA ARTB NB STEPS TMP   ARTB on NB ranks = ARTA on NA ranks: every loss and grad
 *                                          norm, every parameter byte on every rank (DP N with one
 *                                          micro-batch per rank against DP 1 with N; ZeRO-1 against DP);
 *                                          TEST_DP_BIND=1: each rank binds its own micro-batches;
 *                                          TEST_DP_MASK=1 as well: with loss masks (-100), global
 *                                          micro-batch g keeping about 1 target in g + 2, so that the
 *                                          ranks keep different counts and only the global count
 *                                          (Megatron's normalisation) gives DP 1's loss
 *   test_dp resume ARTN N STEPS K TMP      K steps, checkpoint, fresh handles resumed = STEPS straight
 *   test_dp exit   ARTN N                  the last rank leaves after step 1: the others fail, naming it
 *   test_dp hang   ARTN N                  the last rank stops calling: the others fail within the timeout
 *   test_dp refuse ARTN OTHER N            rank 1 opens another artifact: every rank is refused at open
 *   test_dp world  ARTN                    an artifact planned for DP N opened alone: refused
 *   test_dp reshard ARTA NA ARTB NB TMP    a ZeRO-1 checkpoint of NA ranks loaded by NB ranks: refused
 *   test_dp disagree ARTN N TMP            the ranks load checkpoints of different steps, or one rank's load
 *                                          fails: every rank refuses, naming the ranks' values
 *   test_dp env                            stepc_options_from_env under torchrun, mpirun and Slurm
 *   test_dp continue ARTN N STEPS CKPT REF  N ranks load CKPT (another build's, say), run to STEPS: every
 *                                          rank's parameters = REF<rank>.safetensors (the uninterrupted run)
 *   test_dp stranger ARTN                  an idle connection and an HTTP probe at rank 0's port while 2
 *                                          ranks gather: dropped; the job runs, unheld (issue 23)
 *   test_dp guard ARTN                     a comm_timeout_s of inf, NaN or -1 and a missing job secret
 *                                          refused at open; rank 0 listens on master_addr (127.0.0.2) only
 *   test_dp run    ARTN N STEPS PARAMS      STEPS steps on N ranks (tensor parallelism, tests/api/tp.sh):
 *                                          every rank's loss and grad norm the same bits, printed as
 *                                          "step K loss L grad_norm G"; the parameters (gathered over
 *                                          TP: every rank calls the save, rank 0 writes) into PARAMS
 *   test_dp tpload ARTN N PARAMS TMP        N ranks of a TP (or EP) artifact load the one-rank PARAMS (each
 *                                          its shards) and save them again, gathered: the same tensors, bitwise
 * test_dp evaleq ARTA NA ARTB NB PARAMS    stepc_eval of one batch from PARAMS on NA ranks of ARTA and NB of
 *                                          ARTB: loss and per-token log-probs within fp32 tolerances
 * test_dp measure ARTN N PARAMS          one step on N ranks, then each rank's stepc_measure as a line "measure RANK
 * arena REGION STATE MAX_ALLOCATED PREDICTED"; rank 0's parameters saved to PARAMS (their shapes)
 *
 * Prints what it compares; exit 0 on success. */
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../free_port.h"
#include "probe.h"
#include "runtime/comm.h"
#include "runtime/rdv_wire.h"
#include "runtime/stepc.h"

#define MAXR 8
#define MAXS 64
#define TIMEOUT_S 3.0 /* the fault modes' communicator timeout */
/* every other mode's: runs that must succeed wait long enough for a loaded machine (CI's two
 * cores under AddressSanitizer, a ZeRO-1 step's reduce-scatter took more than 3 s there once) */
#define RUN_TIMEOUT_S 120.0

static int fails;
#define CHECK(c, ...)                                                                                      \
  do {                                                                                                     \
    if (!(c)) {                                                                                            \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                 \
      fprintf(stderr, __VA_ARGS__);                                                                        \
      fprintf(stderr, "\n");                                                                               \
      fails++;                                                                                             \
    }                                                                                                      \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef enum { ACT_RUN, ACT_EXIT_AFTER_1, ACT_HANG_AFTER_1 } Action;

typedef struct {
  const char *art;
  int rank, world, port, steps;
  Action act;
  const char *load, *save; /* checkpoint to resume from / to write after the steps */
  const char *load_params; /* parameters to load after the open (stepc_load_params), or NULL */
  int eval;                /* after the load: stepc_eval of a fixed batch (eval_batch) into eval_loss, lp */
  double eval_loss;
  float *lp;               /* the batch's per-token log-probabilities (the caller's, count floats) */
  const char *params;      /* where to save the parameters at the end */
  const char *addr;        /* master_addr; NULL: the default */
  int bind;                /* bind each step's batch (this rank's micro-batches of a global batch);
                              2: with masked targets */
  int fault;               /* a fault mode's job: the short communicator timeout */
  /* out */
  stepc_status open_st, step_st;
  char err[1024];
  double loss[MAXS], gnorm[MAXS];
  int done;
  double fail_after_s;     /* seconds from the last good step to the failing call */
  double open_s;           /* stepc_open's time */
  stepc_measure m;         /* after the steps */
} Rank;

/* Binds this rank's micro-batches of step `step`'s global batch: global micro-batch g's tokens are
 * a function of (step, g, i), and rank r's micro-batch mb is g = mb * world + r. */
static stepc_status bind_global(stepc_t *s, const stepc_info *in, int rank, int world, int step, int masked) {
  size_t per = (size_t)(in->micro_batch_size * in->seq_length), n = per * (size_t)in->num_microbatches;
  int32_t *tok = malloc(n * sizeof *tok), *tg = malloc(n * sizeof *tg);
  if (!tok || !tg) return free(tok), free(tg), STEPC_ERR_NOMEM;
  for (int64_t mb = 0; mb < in->num_microbatches; mb++) {
    uint64_t g = (uint64_t)(mb * world + rank);
    for (size_t i = 0; i < per; i++) {
      uint64_t h = ((uint64_t)step * 1000003u + g) * 2654435761u + i * 40503u;
      tok[(size_t)mb * per + i] = (int32_t)((h >> 7) % (uint64_t)in->vocab_size);
      tg[(size_t)mb * per + i] = (int32_t)((h >> 17) % (uint64_t)in->vocab_size);
      if (masked && (h >> 33) % (g + 2) != 0) tg[(size_t)mb * per + i] = -100;
    }
  }
  stepc_status st = stepc_bind_batch(s, tok, tg, n);
  free(tok), free(tg);
  return st;
}

static void *rank_main(void *p) {
  Rank *r = p;
  stepc_options o = stepc_options_default();
  o.device = STEPC_DEVICE_CPU;
  o.cpu_threads = 1;
  o.rank = r->rank, o.world_size = r->world, o.master_port = r->port;
  o.comm_timeout_s = r->fault ? TIMEOUT_S : RUN_TIMEOUT_S;
  if (r->addr) snprintf(o.master_addr, sizeof o.master_addr, "%s", r->addr);
  stepc_t *s = NULL;
  double t0 = now_s();
  r->open_st = stepc_open(r->art, &o, &s);
  r->open_s = now_s() - t0;
  if (r->open_st != STEPC_OK) {
    snprintf(r->err, sizeof r->err, "%s", stepc_last_error(s));
    stepc_close(s);
    return NULL;
  }
  if ((r->load && (r->step_st = stepc_load_checkpoint(s, r->load)) != STEPC_OK) ||
      (r->load_params && (r->step_st = stepc_load_params(s, r->load_params)) != STEPC_OK)) {
    snprintf(r->err, sizeof r->err, "%s", stepc_last_error(s));
    stepc_close(s);
    return NULL;
  }
  stepc_info in;
  stepc_get_info(s, &in);
  if (r->eval) { /* a fixed batch, the same on every rank (a job of one data-parallel rank) */
    size_t n = (size_t)(in.num_microbatches * in.micro_batch_size * in.seq_length);
    int32_t *tok = malloc(n * sizeof *tok), *tg = malloc(n * sizeof *tg);
    for (size_t i = 0; tok && tg && i < n; i++) {
      uint64_t h = (i + 17) * 2654435761u;
      tok[i] = (int32_t)((h >> 7) % (uint64_t)in.vocab_size), tg[i] = (int32_t)((h >> 17) % (uint64_t)in.vocab_size);
      if (i % 5 == 3) tg[i] = -100; /* some targets ignored */
    }
    r->step_st = tok && tg ? stepc_eval(s, tok, tg, n, &r->eval_loss, r->lp) : STEPC_ERR_NOMEM;
    free(tok), free(tg);
    if (r->step_st != STEPC_OK) snprintf(r->err, sizeof r->err, "%s", stepc_last_error(s));
  }
  double t = now_s();
  for (int i = (int)in.step; i < r->steps; i++) {
    if (r->act == ACT_EXIT_AFTER_1 && r->done == 1) break;
    if (r->act == ACT_HANG_AFTER_1 && r->done == 1) {
      /* alive, connected, silent: only the timeout can tell the others */
      struct timespec ts = {(time_t)(3 * TIMEOUT_S), 0};
      nanosleep(&ts, NULL);
      break;
    }
    if (r->bind && bind_global(s, &in, r->rank, r->world, i + 1, r->bind == 2) != STEPC_OK) {
      r->step_st = STEPC_ERR_ARGUMENT;
      snprintf(r->err, sizeof r->err, "%s", stepc_last_error(s));
      break;
    }
    stepc_step_stats st;
    r->step_st = stepc_step(s, &st);
    if (r->step_st != STEPC_OK) {
      r->fail_after_s = now_s() - t;
      snprintf(r->err, sizeof r->err, "%s", stepc_last_error(s));
      break;
    }
    t = now_s();
    r->loss[i] = st.loss, r->gnorm[i] = st.grad_norm;
    r->done++;
  }
  if (r->step_st == STEPC_OK && r->save) r->step_st = stepc_save_checkpoint(s, r->save);
  if (r->step_st == STEPC_OK && r->params) r->step_st = stepc_save_params(s, r->params);
  if (r->step_st != STEPC_OK && !r->err[0]) snprintf(r->err, sizeof r->err, "%s", stepc_last_error(s));
  stepc_get_measure(s, &r->m);
  stepc_close(s);
  return NULL;
}

static void run_ranks(Rank *r, int n) {
  pthread_t th[MAXR];
  for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, rank_main, &r[i]);
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

/* The tensor bytes of a safetensors file (after its header): malloc'ed, *n their count. */
static unsigned char *tensor_bytes(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  uint64_t h = 0;
  unsigned char *buf = NULL;
  long size = 0;
  if (fread(&h, 8, 1, f) == 1 && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > (long)(8 + h) &&
      fseek(f, (long)(8 + h), SEEK_SET) == 0) {
    *n = (size_t)size - 8 - h;
    buf = malloc(*n);
    if (buf && fread(buf, 1, *n, f) != *n) free(buf), buf = NULL;
  }
  fclose(f);
  return buf;
}

static int same_params(const char *a, const char *b) {
  size_t na = 0, nb = 0;
  unsigned char *x = tensor_bytes(a, &na), *y = tensor_bytes(b, &nb);
  int ok = x && y && na == nb && memcmp(x, y, na) == 0;
  free(x), free(y);
  return ok;
}

static void setup(Rank *r, int n, const char *art, int steps) {
  int port = free_port();
  for (int i = 0; i < n; i++) r[i] = (Rank){.art = art, .rank = i, .world = n, .port = port, .steps = steps};
}

/* ART_A on na ranks against ART_B on nb ranks: every loss and grad norm, every rank's parameters. */
static int mode_equal(const char *arta, int na, const char *artb, int nb, int steps, const char *tmp) {
  static Rank a[MAXR], r[MAXR];
  char pa[MAXR][512], pr[MAXR][512];
  int bind = getenv("TEST_DP_BIND") != NULL; /* bound batches instead of the recipe's data */
  if (bind && getenv("TEST_DP_MASK")) bind = 2;
  setup(a, na, arta, steps);
  for (int i = 0; i < na; i++) snprintf(pa[i], sizeof pa[i], "%s/a%d_rank%d.safetensors", tmp, na, i), a[i].params = pa[i], a[i].bind = bind;
  run_ranks(a, na);
  for (int i = 0; i < na; i++) CHECK(a[i].open_st == STEPC_OK && a[i].step_st == STEPC_OK, "%s rank %d: %s", arta, i, a[i].err);
  setup(r, nb, artb, steps);
  for (int i = 0; i < nb; i++) snprintf(pr[i], sizeof pr[i], "%s/b%d_rank%d.safetensors", tmp, nb, i), r[i].params = pr[i], r[i].bind = bind;
  run_ranks(r, nb);
  for (int i = 0; i < nb; i++) CHECK(r[i].open_st == STEPC_OK && r[i].step_st == STEPC_OK, "%s rank %d: %s", artb, i, r[i].err);
  if (fails) return 1;
  for (int k = 0; k < steps; k++) {
    printf("step %d  %d rank(s): loss %a grad_norm %a | %d ranks:", k + 1, na, a[0].loss[k], a[0].gnorm[k], nb);
    for (int i = 0; i < nb; i++) printf(" rank%d %a", i, r[i].loss[k]);
    printf("\n");
    for (int i = 0; i < nb; i++)
      CHECK(r[i].loss[k] == a[0].loss[k] && r[i].gnorm[k] == a[0].gnorm[k],
            "step %d rank %d: loss %.17g grad_norm %.17g, the reference's %.17g %.17g", k + 1, i, r[i].loss[k], r[i].gnorm[k],
            a[0].loss[k], a[0].gnorm[k]);
  }
  for (int i = 0; i < nb; i++) CHECK(same_params(pa[0], pr[i]), "rank %d's parameters after %d steps differ from the reference's", i, steps);
  if (!fails)
    printf("ok: %s on %d ranks = %s on %d%s: %d steps' losses, grad norms and every parameter byte on every rank\n", artb, nb, arta,
           na, bind == 2 ? " (bound batches with masked targets, each rank its own micro-batches)" : bind ? " (bound batches, each rank its own micro-batches)" : "", steps);
  return fails != 0;
}

/* A sharded checkpoint of na ranks opened by nb ranks: refused, with the reason. */
static int mode_reshard(const char *arta, int na, const char *artb, int nb, const char *tmp) {
  static Rank a[MAXR], b[MAXR];
  char ck[512];
  snprintf(ck, sizeof ck, "%s/zero_ckpt", tmp);
  setup(a, na, arta, 1);
  for (int i = 0; i < na; i++) a[i].save = ck;
  run_ranks(a, na);
  for (int i = 0; i < na; i++) CHECK(a[i].step_st == STEPC_OK, "rank %d: %s", i, a[i].err);
  setup(b, nb, artb, 2);
  for (int i = 0; i < nb; i++) b[i].load = ck;
  run_ranks(b, nb);
  for (int i = 0; i < nb; i++) {
    printf("rank %d of %d loading the checkpoint of %d ranks: %s: %s\n", i, nb, na, stepc_status_name(b[i].step_st), b[i].err);
    CHECK(b[i].step_st == STEPC_ERR_MISMATCH && strstr(b[i].err, "cannot be re-cut"), "rank %d should refuse the checkpoint", i);
  }
  if (!fails) printf("ok: a sharded optimizer checkpoint of %d ranks is refused by %d ranks, with the reason\n", na, nb);
  return fails != 0;
}

static int mode_resume(const char *artn, int n, int steps, int k, const char *tmp) {
  static Rank a[MAXR], b[MAXR], c[MAXR];
  char pa[MAXR][512], pc[MAXR][512], ck[512];
  snprintf(ck, sizeof ck, "%s/ckpt", tmp);
  setup(a, n, artn, steps);
  for (int i = 0; i < n; i++) snprintf(pa[i], sizeof pa[i], "%s/straight%d.safetensors", tmp, i), a[i].params = pa[i];
  run_ranks(a, n);
  setup(b, n, artn, k);
  for (int i = 0; i < n; i++) b[i].save = ck;
  run_ranks(b, n);
  setup(c, n, artn, steps);
  for (int i = 0; i < n; i++) c[i].load = ck, snprintf(pc[i], sizeof pc[i], "%s/resumed%d.safetensors", tmp, i), c[i].params = pc[i];
  run_ranks(c, n);
  for (int i = 0; i < n; i++)
    CHECK(a[i].step_st == STEPC_OK && b[i].step_st == STEPC_OK && c[i].step_st == STEPC_OK && c[i].open_st == STEPC_OK,
          "rank %d: %s%s%s", i, a[i].err, b[i].err, c[i].err);
  if (fails) return 1;
  for (int s = 0; s < steps; s++) {
    double got = s < k ? b[0].loss[s] : c[0].loss[s];
    printf("step %d  straight %a  %s %a\n", s + 1, a[0].loss[s], s < k ? "before the checkpoint" : "resumed", got);
    for (int i = 0; i < n; i++)
      CHECK((s < k ? b[i].loss[s] : c[i].loss[s]) == a[i].loss[s], "step %d rank %d: the resumed run's loss differs", s + 1, i);
  }
  for (int i = 0; i < n; i++) /* TP / EP: rank 0 writes the gathered parameters, the others none */
    if (i == 0 || access(pa[i], F_OK) == 0 || access(pc[i], F_OK) == 0)
      CHECK(same_params(pa[i], pc[i]), "rank %d: parameters after the resumed run differ", i);
  if (!fails) printf("ok: %d ranks resumed at step %d = the uninterrupted run (losses, every parameter byte)\n", n, k);
  return fails != 0;
}

/* Runs n ranks of artn with rank i loading ck[i] and 0 steps beyond it: every rank's status and message. */
static void load_each(const char *artn, int n, const char *const *ck, Rank *r) {
  setup(r, n, artn, 0);
  for (int i = 0; i < n; i++)
    r[i].load = ck[i];
  run_ranks(r, n);
}

/* The ranks resume from checkpoints of different steps, or one rank's checkpoint is missing:
 * every rank refuses (none trains on from its own state), and the message names the ranks. */
static int mode_disagree(const char *artn, int n, const char *tmp) {
  static Rank a[MAXR], b[MAXR], c[MAXR];
  char ck1[512], ck2[512], none[512];
  snprintf(ck1, sizeof ck1, "%s/disagree1", tmp), snprintf(ck2, sizeof ck2, "%s/disagree2", tmp);
  snprintf(none, sizeof none, "%s/no_such_checkpoint", tmp);
  for (int k = 1; k <= 2; k++) {
    setup(a, n, artn, k);
    for (int i = 0; i < n; i++)
      a[i].save = k == 1 ? ck1 : ck2;
    run_ranks(a, n);
    for (int i = 0; i < n; i++)
      CHECK(a[i].step_st == STEPC_OK, "saving at step %d, rank %d: %s", k, i, a[i].err);
  }
  const char *mixed[MAXR] = {0}, *missing[MAXR] = {0};
  for (int i = 0; i < n; i++)
    mixed[i] = i == n - 1 ? ck2 : ck1, missing[i] = i == n - 1 ? none : ck1;
  load_each(artn, n, mixed, b);
  for (int i = 0; i < n; i++) {
    printf("rank %d, checkpoints of steps 1 and 2 mixed: %s: %s\n", i, stepc_status_name(b[i].step_st),
           b[i].err);
    CHECK(b[i].step_st == STEPC_ERR_MISMATCH && strstr(b[i].err, "rank 0: step 1") &&
              strstr(b[i].err, "step 2, checkpoint"),
          "rank %d should refuse the mixed checkpoints, naming the ranks' steps", i);
  }
  load_each(artn, n, missing, c);
  for (int i = 0; i < n; i++) {
    printf("rank %d, rank %d's checkpoint missing: %s: %s\n", i, n - 1, stepc_status_name(c[i].step_st),
           c[i].err);
    CHECK(c[i].step_st == STEPC_ERR_IO && (i == n - 1 ? strstr(c[i].err, "no_such_checkpoint") != NULL
                                                      : strstr(c[i].err, "could not load") != NULL),
          "rank %d should fail with rank %d's load", i, n - 1);
  }
  load_each(artn, n, (const char *[]){ck2, ck2, ck2, ck2, ck2, ck2, ck2, ck2}, a);
  for (int i = 0; i < n; i++)
    CHECK(a[i].step_st == STEPC_OK, "rank %d, the same checkpoint everywhere: %s", i, a[i].err);
  /* a save into the user's folder: rank 0 refuses, and every rank returns its refusal */
  char mine[600], cmd[1400];
  snprintf(mine, sizeof mine, "%s/mine", tmp);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s' && echo x > '%s/thesis.tex'", mine, mine);
  CHECK(system(cmd) == 0, "%s", cmd);
  setup(a, n, artn, 1);
  for (int i = 0; i < n; i++)
    a[i].save = mine;
  run_ranks(a, n);
  for (int i = 0; i < n; i++)
    CHECK(a[i].step_st == STEPC_ERR_IO, "rank %d, a save into the user's folder: %s", i, a[i].err);
  snprintf(cmd, sizeof cmd, "test \"$(ls -A '%s')\" = thesis.tex && grep -qx x '%s/thesis.tex'", mine, mine);
  CHECK(system(cmd) == 0, "the user's folder changed");
  if (!fails)
    printf("ok: %d ranks that load different checkpoints, or where one load fails, or that save into the "
           "user's folder, all "
           "refuse\n",
           n);
  return fails != 0;
}

static int mode_fault(const char *artn, int n, Action act) {
  static Rank r[MAXR];
  setup(r, n, artn, 4);
  for (int i = 0; i < n; i++) r[i].fault = 1;
  r[n - 1].act = act;
  double t0 = now_s();
  run_ranks(r, n);
  double wall = now_s() - t0;
  for (int i = 0; i < n - 1; i++) {
    printf("rank %d: %d steps, then (%.2f s later) %s: %s\n", i, r[i].done, r[i].fail_after_s, stepc_status_name(r[i].step_st),
           r[i].err);
    CHECK(r[i].open_st == STEPC_OK && r[i].done == 1 && r[i].step_st == STEPC_ERR_RUNTIME, "rank %d should fail at step 2", i);
    /* bounded: the rank that is gone is seen at once; the silent one after the timeout (plus the
     * step's own compute) — never an unbounded wait */
    CHECK(r[i].fail_after_s < (act == ACT_HANG_AFTER_1 ? 2 * TIMEOUT_S + 5 : TIMEOUT_S + 5), "rank %d failed after %.1f s", i,
          r[i].fail_after_s);
    char want[64];
    snprintf(want, sizeof want, "rank %d", n - 1);
    CHECK(i != 0 || strstr(r[i].err, want), "rank 0's message should name rank %d: %s", n - 1, r[i].err);
    CHECK(strstr(r[i].err, act == ACT_HANG_AFTER_1 ? "within" : "closed") || (i != 0 && strstr(r[i].err, "closed")),
          "rank %d's message: %s", i, r[i].err);
  }
  printf("the job ended %.2f s after it started (timeout %.0f s)\n", wall, TIMEOUT_S);
  if (!fails) printf("ok: a rank that %s makes every other rank fail with a message within the bound\n", act == ACT_HANG_AFTER_1 ? "hangs" : "exits");
  return fails != 0;
}

static int mode_refuse(const char *artn, const char *other, int n) {
  static Rank r[MAXR];
  setup(r, n, artn, 1);
  r[1].art = other;
  run_ranks(r, n);
  for (int i = 0; i < n; i++) {
    printf("rank %d (%s): %s: %s\n", i, r[i].art, stepc_status_name(r[i].open_st), r[i].err);
    CHECK(r[i].open_st == STEPC_ERR_MISMATCH && strstr(r[i].err, "rank 1 runs another artifact"), "rank %d should be refused at open", i);
  }
  if (!fails) printf("ok: a rank with another artifact is refused at open, on every rank\n");
  return fails != 0;
}

static int mode_world(const char *artn) {
  static Rank r[1];
  setup(r, 1, artn, 1);
  run_ranks(r, 1);
  printf("alone: %s: %s\n", stepc_status_name(r[0].open_st), r[0].err);
  CHECK(r[0].open_st == STEPC_ERR_MISMATCH && strstr(r[0].err, "planned for"), "an artifact of DP N opened alone must be refused");
  return fails != 0;
}

/* Rank 0 alone first; `between` runs once it listens; then rank 1. */
static void run_two(Rank *r, int (*between)(Rank *r)) {
  pthread_t th[2];
  pthread_create(&th[0], NULL, rank_main, &r[0]);
  CHECK(probe_await(r[0].addr ? r[0].addr : "127.0.0.1", r[0].port) == 0, "rank 0 never listened");
  if (between) between(r);
  pthread_create(&th[1], NULL, rank_main, &r[1]);
  pthread_join(th[0], NULL), pthread_join(th[1], NULL);
}

static int strangers_fd[2];
static int strangers(Rank *r) {
  strangers_fd[0] = probe_dial("127.0.0.1", r[0].port); /* idle */
  strangers_fd[1] = probe_dial("127.0.0.1", r[0].port);
  const char http[] = "GET /healthz HTTP/1.1\r\nHost: rank0\r\n\r\n";
  CHECK(strangers_fd[1] >= 0 && send(strangers_fd[1], http, sizeof http - 1, 0) > 0, "the HTTP probe");
  return 0;
}

/* Strangers at rank 0's port do not hold, fail or join the job (the real ranks run 2 steps). */
static int mode_stranger(const char *artn) {
  static Rank r[2];
  setup(r, 2, artn, 2);
  run_two(r, strangers);
  for (int i = 0; i < 2; i++) {
    if (strangers_fd[i] >= 0) close(strangers_fd[i]);
    printf("rank %d: open %.2f s, %d steps: %s %s\n", i, r[i].open_s, r[i].done, stepc_status_name(r[i].step_st), r[i].err);
    CHECK(r[i].open_st == STEPC_OK && r[i].step_st == STEPC_OK && r[i].done == 2, "rank %d: %s", i, r[i].err);
  }
  CHECK(r[0].loss[1] == r[1].loss[1], "the ranks' losses differ: %.17g %.17g", r[0].loss[1], r[1].loss[1]);
  /* an idle connection held the old rendezvous to the timeout; now it waits on nobody */
  CHECK(r[0].open_s < RT_COMM_HELLO_TIMEOUT_S - 2, "rank 0's open took %.1f s beside an idle connection", r[0].open_s);
  if (!fails) printf("ok: an idle connection and an HTTP probe at the rendezvous are dropped; the job ran\n");
  return fails != 0;
}

static int other_address_closed(Rank *r) {
  int fd = probe_dial("127.0.0.1", r[0].port);
  CHECK(fd < 0 && errno == ECONNREFUSED, "master_addr is 127.0.0.2, yet 127.0.0.1:%d answers (every interface)", r[0].port);
  if (fd >= 0) close(fd);
  return 0;
}

/* What stepc_open refuses before any socket, and where rank 0 listens. */
static int mode_guard(const char *artn) {
  static const double bad[] = {INFINITY, NAN, -1};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    stepc_options o = stepc_options_default();
    o.device = STEPC_DEVICE_CPU, o.world_size = 2, o.master_port = free_port(), o.comm_timeout_s = bad[i];
    stepc_t *s = NULL;
    stepc_status st = stepc_open(artn, &o, &s);
    printf("comm_timeout_s %g: %s: %s\n", bad[i], stepc_status_name(st), stepc_last_error(s));
    CHECK(st == STEPC_ERR_ARGUMENT && strstr(stepc_last_error(s), "comm_timeout_s"), "a timeout of %g must be refused", bad[i]);
    stepc_close(s);
  }
  char *secret = strdup(getenv(RDV_SECRET_ENV));
  unsetenv(RDV_SECRET_ENV);
  static Rank r[2];
  setup(r, 2, artn, 1);
  run_ranks(r, 1); /* rank 0 alone: refused before it listens */
  printf("no secret: %s: %s\n", stepc_status_name(r[0].open_st), r[0].err);
  CHECK(r[0].open_st == STEPC_ERR_ARGUMENT && strstr(r[0].err, RDV_SECRET_ENV), "a rendezvous without the secret must be refused");
  setenv(RDV_SECRET_ENV, secret, 1);
  free(secret);
  setup(r, 2, artn, 1);
  r[0].addr = r[1].addr = "127.0.0.2";
  run_two(r, other_address_closed);
  for (int i = 0; i < 2; i++) CHECK(r[i].open_st == STEPC_OK && r[i].step_st == STEPC_OK, "rank %d at 127.0.0.2: %s", i, r[i].err);
  if (!fails) printf("ok: timeouts inf, NaN, -1 and a missing job secret refused at open; rank 0 listens on master_addr only\n");
  return fails != 0;
}

/* A checkpoint written elsewhere (by another build) resumed here: bitwise the uninterrupted run. */
static int mode_continue(const char *artn, int n, int steps, const char *ck, const char *ref) {
  static Rank c[MAXR];
  char pc[MAXR][512], pr[MAXR][512];
  setup(c, n, artn, steps);
  for (int i = 0; i < n; i++) c[i].load = ck, snprintf(pc[i], sizeof pc[i], "%s.continued%d.safetensors", ref, i), c[i].params = pc[i];
  run_ranks(c, n);
  for (int i = 0; i < n; i++) {
    snprintf(pr[i], sizeof pr[i], "%s%d.safetensors", ref, i);
    CHECK(c[i].open_st == STEPC_OK && c[i].step_st == STEPC_OK, "rank %d: %s", i, c[i].err);
    CHECK(!fails && same_params(pr[i], pc[i]), "rank %d: the parameters after the resumed run differ from %s", i, pr[i]);
  }
  if (!fails) printf("ok: %s resumed on %d ranks at step %d to %d = the uninterrupted run's parameters\n", ck, n, c[0].steps - c[0].done, steps);
  return fails != 0;
}

/* Each rank's measured memory after one step (tests/api/dp.sh compares it with the plan). */
static int mode_run(const char *art, int n, int steps, const char *params) {
  static Rank r[MAXR];
  static char pr[MAXR][600];
  setup(r, n, art, steps);
  /* rank 0's at params; the others (under TP or EP they gather with rank 0, which writes) beside it */
  for (int i = 0; i < n; i++)
    snprintf(pr[i], sizeof pr[i], i ? "%s.rank%d" : "%s", params, i), r[i].params = pr[i];
  run_ranks(r, n);
  for (int i = 0; i < n; i++)
    CHECK(r[i].open_st == STEPC_OK && r[i].step_st == STEPC_OK, "%s rank %d: %s", art, i, r[i].err);
  if (fails) return 1;
  for (int k = 0; k < steps; k++) {
    printf("step %d loss %.17g grad_norm %.17g\n", k + 1, r[0].loss[k], r[0].gnorm[k]);
    for (int i = 1; i < n; i++)
      CHECK(r[i].loss[k] == r[0].loss[k] && r[i].gnorm[k] == r[0].gnorm[k],
            "step %d: rank %d's loss %a grad_norm %a, rank 0's %a %a", k + 1, i, r[i].loss[k], r[i].gnorm[k],
            r[0].loss[k], r[0].gnorm[k]);
  }
  return fails != 0;
}

/* stepc_eval of one fixed batch on na ranks of arta and nb of artb, each from the one-rank
 * parameters: the loss and every per-token log-probability of b's ranks within (loss_rel, lp_abs) of
 * a's rank 0, and b's ranks bitwise the same. */
static int mode_evaleq(const char *arta, int na, const char *artb, int nb, const char *params) {
  static Rank a[MAXR], b[MAXR];
  enum { NLP = 1 << 16 };
  static float lpa[MAXR][NLP], lpb[MAXR][NLP];
  setup(a, na, arta, 0);
  for (int i = 0; i < na; i++) a[i].load_params = params, a[i].eval = 1, a[i].lp = lpa[i];
  run_ranks(a, na);
  setup(b, nb, artb, 0);
  for (int i = 0; i < nb; i++) b[i].load_params = params, b[i].eval = 1, b[i].lp = lpb[i];
  run_ranks(b, nb);
  for (int i = 0; i < na; i++) CHECK(a[i].step_st == STEPC_OK, "%s rank %d: %s", arta, i, a[i].err);
  for (int i = 0; i < nb; i++) CHECK(b[i].step_st == STEPC_OK, "%s rank %d: %s", artb, i, b[i].err);
  if (fails) return 1;
  stepc_t *s = NULL; /* the batch's size, from the artifact */
  stepc_options o = stepc_options_default();
  o.device = STEPC_DEVICE_CPU;
  int64_t n = 0;
  if (stepc_open(arta, &o, &s) == STEPC_OK) {
    stepc_info in;
    stepc_get_info(s, &in);
    n = in.num_microbatches * in.micro_batch_size * in.seq_length;
  }
  stepc_close(s);
  CHECK(n > 0 && n <= NLP, "the batch of %lld tokens (at most %d)", (long long)n, NLP);
  if (fails) return 1;
  double worst = 0, rel = fabs(b[0].eval_loss - a[0].eval_loss) / fabs(a[0].eval_loss);
  int ignored = 0;
  for (int64_t k = 0; k < n; k++) {
    double d = fabs((double)lpb[0][k] - (double)lpa[0][k]);
    worst = d > worst ? d : worst, ignored += lpa[0][k] == 0.0f;
  }
  for (int i = 1; i < nb; i++)
    CHECK(b[i].eval_loss == b[0].eval_loss && !memcmp(lpb[i], lpb[0], (size_t)n * sizeof(float)),
          "%s rank %d's evaluation differs from rank 0's", artb, i);
  CHECK(rel <= 1e-5 && worst <= 1e-4 && ignored > 0,
        "%s against %s: loss %.9g vs %.9g (%.2g relative), log-probs within %.2g, %d ignored", artb, arta, b[0].eval_loss,
        a[0].eval_loss, rel, worst, ignored);
  if (!fails)
    printf("ok: stepc_eval on %d ranks = on %d: loss %.9g (%.2g relative), %lld log-probs within %.2g (%d ignored targets 0)\n",
           nb, na, b[0].eval_loss, rel, (long long)n, worst, ignored);
  return fails != 0;
}

/* n ranks of a TP (or EP) artifact load a one-rank parameter file, each taking its shards, and save
 * the parameters again (gathered, rank 0 writes): every tensor's bytes as loaded. */
static int mode_tpload(const char *art, int n, const char *params, const char *tmp) {
  static Rank r[MAXR];
  char out[512];
  snprintf(out, sizeof out, "%s/tpload.safetensors", tmp);
  setup(r, n, art, 0);
  for (int i = 0; i < n; i++) r[i].load_params = params, r[i].params = out;
  run_ranks(r, n);
  for (int i = 0; i < n; i++)
    CHECK(r[i].open_st == STEPC_OK && r[i].step_st == STEPC_OK, "rank %d: open %d, load/save %d: %s", i, (int)r[i].open_st,
          (int)r[i].step_st, r[i].err);
  CHECK(!fails && same_params(params, out), "the parameters loaded over %d ranks and gathered again differ from %s", n, params);
  if (!fails) printf("ok: %d ranks loaded the one-rank parameters (each its shards) and gathered them back bitwise\n", n);
  return fails != 0;
}

static int mode_measure(const char *artn, int n, const char *params) {
  static Rank r[MAXR];
  static char pr[MAXR][600];
  setup(r, n, artn, 1);
  /* rank 0's at params; the others (under TP or EP they gather with rank 0, which writes) beside it */
  for (int i = 0; i < n; i++)
    snprintf(pr[i], sizeof pr[i], i ? "%s.rank%d" : "%s", params, i), r[i].params = pr[i];
  run_ranks(r, n);
  for (int i = 0; i < n; i++) {
    CHECK(r[i].open_st == STEPC_OK && r[i].step_st == STEPC_OK, "rank %d: %s", i, r[i].err);
    printf("measure %d %lld %lld %lld %lld %lld\n", i, (long long)r[i].m.arena_bytes, (long long)r[i].m.optimizer_region_bytes,
           (long long)r[i].m.optimizer_state_bytes, (long long)r[i].m.max_allocated_bytes, (long long)r[i].m.predicted_peak_bytes);
  }
  return fails != 0;
}

/* stepc_options_from_env under each launcher's variables. */
static int mode_env(void) {
  static const char *all[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                              "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "MASTER_ADDR",
                              "MASTER_PORT"};
  static const struct {
    const char *vars[8];
    stepc_status st;
    int rank, world, local, port;
    const char *addr;
  } C[] = {
      {{NULL}, STEPC_OK, 0, 1, 0, 29500, "127.0.0.1"},
      {{"RANK=3", "WORLD_SIZE=8", "LOCAL_RANK=1", "MASTER_ADDR=node7", "MASTER_PORT=1234"}, STEPC_OK, 3, 8, 1, 1234, "node7"},
      {{"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=6", "OMPI_COMM_WORLD_LOCAL_RANK=2"}, STEPC_OK, 5, 6, 2, 29500, "127.0.0.1"},
      {{"SLURM_PROCID=9", "SLURM_NTASKS=16", "SLURM_LOCALID=1", "MASTER_ADDR=n0"}, STEPC_OK, 9, 16, 1, 29500, "n0"},
      /* torchrun's variables win over Slurm's (torchrun inside an allocation) */
      {{"SLURM_PROCID=0", "SLURM_NTASKS=2", "RANK=1", "WORLD_SIZE=4"}, STEPC_OK, 1, 4, 0, 29500, "127.0.0.1"},
      {{"RANK=4", "WORLD_SIZE=4"}, STEPC_ERR_ARGUMENT, 0, 1, 0, 29500, "127.0.0.1"},
      {{"RANK=x", "WORLD_SIZE=4"}, STEPC_ERR_ARGUMENT, 0, 1, 0, 29500, "127.0.0.1"},
      {{"RANK=0", "WORLD_SIZE=2", "MASTER_PORT=99999"}, STEPC_ERR_ARGUMENT, 0, 1, 0, 29500, "127.0.0.1"},
      {{"SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_LOCALID=0"}, STEPC_OK, 0, 1, 0, 29500, "127.0.0.1"}, /* alone: no communicator */
  };
  for (size_t c = 0; c < sizeof C / sizeof C[0]; c++) {
    for (size_t v = 0; v < sizeof all / sizeof all[0]; v++) unsetenv(all[v]);
    for (int v = 0; C[c].vars[v]; v++) putenv((char *)C[c].vars[v]);
    stepc_options o = stepc_options_default();
    stepc_status st = stepc_options_from_env(&o);
    CHECK(st == C[c].st && o.rank == C[c].rank && o.world_size == C[c].world && o.local_rank == C[c].local &&
              o.master_port == C[c].port && !strcmp(o.master_addr, C[c].addr) && o.dp_join == (st == STEPC_OK && o.world_size > 1),
          "case %zu: status %d rank %d world %d local %d port %d addr %s", c, st, o.rank, o.world_size, o.local_rank,
          o.master_port, o.master_addr);
  }
  for (size_t v = 0; v < sizeof all / sizeof all[0]; v++) unsetenv(all[v]);
  if (!fails) printf("ok: stepc_options_from_env reads torchrun, mpirun and Slurm, refuses malformed values\n");
  return fails != 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_dp equal|resume|exit|hang|refuse|world ARGS (see the file's comment)\n");
    return 2;
  }
  const char *m = argv[1];
  /* the ranks are threads of one process: one secret in the environment for them all */
  setenv(RDV_SECRET_ENV, "test_dp's job secret, 0123456789", 0);
  if (!strcmp(m, "tpload") && argc == 6) return mode_tpload(argv[2], atoi(argv[3]), argv[4], argv[5]);
  if (!strcmp(m, "evaleq") && argc == 7) return mode_evaleq(argv[2], atoi(argv[3]), argv[4], atoi(argv[5]), argv[6]);
  if (!strcmp(m, "run") && argc == 6) return mode_run(argv[2], atoi(argv[3]), atoi(argv[4]), argv[5]);
  if (!strcmp(m, "equal") && argc == 8) return mode_equal(argv[2], atoi(argv[3]), argv[4], atoi(argv[5]), atoi(argv[6]), argv[7]);
  if (!strcmp(m, "disagree") && argc == 5) return mode_disagree(argv[2], atoi(argv[3]), argv[4]);
  if (!strcmp(m, "reshard") && argc == 7) return mode_reshard(argv[2], atoi(argv[3]), argv[4], atoi(argv[5]), argv[6]);
  if (!strcmp(m, "resume") && argc == 7) return mode_resume(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), argv[6]);
  if (!strcmp(m, "exit") && argc == 4) return mode_fault(argv[2], atoi(argv[3]), ACT_EXIT_AFTER_1);
  if (!strcmp(m, "hang") && argc == 4) return mode_fault(argv[2], atoi(argv[3]), ACT_HANG_AFTER_1);
  if (!strcmp(m, "refuse") && argc == 5) return mode_refuse(argv[2], argv[3], atoi(argv[4]));
  if (!strcmp(m, "world") && argc == 3) return mode_world(argv[2]);
  if (!strcmp(m, "env")) return mode_env();
  if (!strcmp(m, "stranger") && argc == 3) return mode_stranger(argv[2]);
  if (!strcmp(m, "guard") && argc == 3) return mode_guard(argv[2]);
  if (!strcmp(m, "continue") && argc == 7) return mode_continue(argv[2], atoi(argv[3]), atoi(argv[4]), argv[5], argv[6]);
  if (!strcmp(m, "measure") && argc == 5) return mode_measure(argv[2], atoi(argv[3]), argv[4]);
  fprintf(stderr, "test_dp: bad arguments for %s\n", m);
  return 2;
}
