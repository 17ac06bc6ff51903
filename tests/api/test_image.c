/* test_image.c — a step image edited and re-signed (its hash made right again, as anyone can) is
 * refused at stepc_open with a message naming the field, instead of crashing or running with
 * nonsense (runtime/image_check.c). Usage: test_image DIR [AUTO_DIR [COMM_DIR]], DIR an artifact
 * (tests/api/inputs.sh builds one), AUTO_DIR one built with attention_backend=auto, on which the
 * attention cases (12 on) edit the launch program's flash alternatives (runtime/program.h), COMM_DIR
 * one whose program has communication-stream windows (train.force_parallel_lowering with SP), on
 * which cases 20 on move its forks, joins and side collectives out of place. Each case reads DIR/step.img, changes one fact, writes it back with image_write
 * (which seals it) into a scratch artifact and opens it on the CPU device; the unedited image must
 * open and step. Before image_check, vocab_size 0 was a SIGFPE in the first step's mock tokens,
 * a shrunk tensor slot a heap overflow, a huge num_microbatches or arena an allocation of it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/image.h"
#include "runtime/stepc.h"

static int fails;

/* The first op of a kind with a created output (its shape is its inputs'). */
static int first_op(const Graph *g, OpKind k) {
  for (int o = 0; o < g->nop; o++)
    if (g->op[o].kind == k) return o;
  return 0;
}

/* The first program point with a flash alternative (attention_backend=auto), else 0. */
static int alt_point(const StepImage *im) {
  for (int q = 0; q < im->npoints; q++)
    if (im->lp.point[q].alt.count) return q;
  return 0;
}

/* The first record of a kind (and, for a collective, on the communication stream or not) at or after
 * record i, else -1. */
static int rec_at(const StepImage *im, int i, RtRecKind k, int side) {
  for (; i < im->lp.f.nrec; i++)
    if (im->lp.rec[i].kind == k && (k != RT_REC_COLL || !!im->lp.rec[i].coll.side == side)) return i;
  return -1;
}

/* One edit of the image (case id), applied in place. */
static void edit(StepImage *im, int id) {
  Graph *g = im->g;
  const Tensor *tk = &g->t[g->tokens];
  switch (id) {
  case 1: im->f.vocab_size = 0; break;
  case 2: g->num_microbatches = 1 << 28; break;
  case 3: im->f.cpu_arena = (int64_t)1 << 45; break;
  case 4: im->f.seq_length = tk->shape[1] + 1; break; /* not the tokens' length */
  case 5: im->cpu_bytes[0] = 4; break;                /* a slot smaller than its tensor */
  case 6: {                                           /* an output its inputs do not give, same size */
    Tensor *t = &g->t[g->op[first_op(g, OP_LINEAR)].out[0]];
    t->shape[0] *= 2, t->shape[1] /= 2;
    break;
  }
  case 7: im->f.graph_mode = 9; break;
  case 8: im->point_op[0] = g->nop; break;
  case 9: im->f.train_iters = -5; break;
  case 10: im->storage[g->tokens] = g->nt; break;  /* the storage of no tensor */
  case 11: im->storage[0] = 1, im->storage[1] = 2; break; /* on a tensor that is on another's */
  /* attention_backend=auto's alternatives */
  case 13: im->lp.point[alt_point(im)].alt = (LpRange){0, 0}; break;       /* a cuDNN call without one */
  case 14: im->lp.point[0].alt = im->lp.point[alt_point(im)].alt; break;   /* one where no cuDNN call is */
  case 15: im->lp.point[alt_point(im)].alt = im->lp.point[alt_point(im)].rec; break; /* a cuDNN call as one */
  case 16: im->lp.point[alt_point(im)].alt.first = im->lp.f.nrec; break;  /* past the records */
  case 17: im->lp.f.attn = LP_ATTN_FLASH; break; /* cuDNN calls in a flash program */
  case 18: im->lp.f.attn = 7; break;
  case 19: { /* another op's records as the alternative */
    int q = alt_point(im), r = im->lp.point[q + 1].rec.count ? q + 1 : q + 2;
    im->lp.point[q].alt = im->lp.point[r].rec;
    break;
  }
  /* the communication stream's windows (COMM_DIR) */
  case 21: im->lp.rec[rec_at(im, 0, RT_REC_JOIN, 0)].kind = RT_REC_FORK; break; /* two forks */
  case 22: im->lp.rec[rec_at(im, 0, RT_REC_FORK, 0)].kind = RT_REC_JOIN; break; /* a join first */
  case 23: im->lp.rec[rec_at(im, 0, RT_REC_COLL, 0)].coll.side = 1; break;      /* a side collective alone */
  case 24: { /* the last window's join taken out: a fork open at the micro program's end */
    int j = -1;
    for (int i = rec_at(im, 0, RT_REC_JOIN, 0); i >= 0; i = rec_at(im, i + 1, RT_REC_JOIN, 0))
      j = i;
    im->lp.rec[j].kind = RT_REC_MEMSET, im->lp.rec[j].dst = LP_PTR, im->lp.rec[j].bytes = 0;
    break;
  }
  case 25: { /* a fork in an evaluation's records */
    int f = rec_at(im, 0, RT_REC_FORK, 0);
    im->lp.point[0].eval = (LpRange){f, 1};
    break;
  }
  case 26: im->lp.rec[rec_at(im, 0, RT_REC_COLL, 1)].coll.side = 2; break; /* a stream that is none */
  }
}

static const char *const FIELD[] = {NULL,       "vocab_size", "num_microbatches", "cpu_arena", "seq_length",
                                    "CPU slot", "linear",     "graph_mode",       "point_op",  "train_iters",
                                    "storage",  "storage",
                                    /* the attention cases, on AUTO_DIR: unedited, then edited */
                                    NULL, "without its flash alternative", "hold no cuDNN attention call",
                                    "holds a cuDNN call", "out of range", "cuDNN attention calls in a program",
                                    "attention lowering 7", "not op",
                                    /* the communication-stream cases, on COMM_DIR: unedited, then edited */
                                    NULL, "communication-stream fork out of place",
                                    "communication-stream join out of place",
                                    "communication-stream collective out of place", "not joined",
                                    "communication-stream fork out of place",
                                    "communication-stream collective out of place"};
enum { NCASES = 27, FIRST_ATTN_CASE = 12, FIRST_COMM_CASE = 20 };

/* Opens dir on the CPU and runs one step: STEPC_OK or the first failure, its message in msg. */
static stepc_status open_step(const char *dir, char *msg, size_t n) {
  stepc_options o = stepc_options_default();
  o.device = STEPC_DEVICE_CPU;
  o.cpu_threads = 1;
  stepc_t *s = NULL;
  stepc_step_stats st;
  stepc_status rc = stepc_open(dir, &o, &s);
  if (rc == STEPC_OK) rc = stepc_step(s, &st);
  snprintf(msg, n, "%s", rc == STEPC_OK ? "" : stepc_last_error(s));
  stepc_close(s);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 4) return fprintf(stderr, "usage: test_image DIR [AUTO_DIR [COMM_DIR]]\n"), 2;
  char src[512], dir[] = "/tmp/stepc_test_image.XXXXXX", dst[600], err[1024], msg[1024];
  if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
  snprintf(dst, sizeof dst, "%s/%s", dir, STEPC_IMAGE_FILE);
  for (int id = 0; id < NCASES; id++) {
    if ((id == FIRST_ATTN_CASE && argc < 3) || (id == FIRST_COMM_CASE && argc < 4)) break;
    /* the auto (comm) artifact, unedited (it opens and steps), then edited */
    int which = id >= FIRST_COMM_CASE ? 3 : id >= FIRST_ATTN_CASE ? 2 : 1,
        unedited = id == 0 || id == FIRST_ATTN_CASE || id == FIRST_COMM_CASE;
    snprintf(src, sizeof src, "%s/%s", argv[which], STEPC_IMAGE_FILE);
    StepImage im;
    if (image_read(src, &im, err, sizeof err) != 0) return fprintf(stderr, "FAIL: %s\n", err), 1;
    edit(&im, id);
    int wrote = image_write(dst, &im, err, sizeof err);
    image_free(&im);
    if (wrote != 0) return fprintf(stderr, "FAIL: %s\n", err), 1;
    stepc_status rc = open_step(dir, msg, sizeof msg);
    int ok = unedited ? rc == STEPC_OK : rc == STEPC_ERR_IO && strstr(msg, FIELD[id]) != NULL;
    printf("%s case %d (%s): %s %s\n", ok ? "ok  " : "FAIL", id, unedited ? "unedited" : FIELD[id],
           stepc_status_name(rc), msg);
    fails += !ok;
  }
  remove(dst);
  rmdir(dir);
  return fails ? 1 : 0;
}
