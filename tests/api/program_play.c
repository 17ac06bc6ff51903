/* program_play DIR — the launch program of DIR's step.img, played by the runtime's player
 * (runtime/cuda/player.h) on a recording device: what it launches must be the program, record for
 * record, each pointer relocated against the step's allocation — the initialisation, every
 * micro-batch's begin, micro program and end, then the tail. Prints the counts; exit 0 when equal,
 * 1 on a difference or an unreadable image. An image without a program must say why. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda/player.h"
#include "runtime/image.h"
#include "runtime/record.h"

static int fails;

/* The program's record r as the player must launch it at allocation base `base`. */
static RtRec expected(const RtRec *r, const RtDevice *d, CUdeviceptr base) {
  RtRec e = *r;
  uint64_t *p[2 + LP_MAX_ARGS];
  int n = 0;
  if (e.kind == RT_REC_LAUNCH) {
    const char *sig = rt_ksig(d, (int)e.k);
    for (int i = 0; i < e.nargs; i++)
      if (sig[i] == 'p') p[n++] = &e.arg[i];
  }
  if (e.kind == RT_REC_MEMSET || e.kind == RT_REC_COPY) p[n++] = (uint64_t *)&e.dst;
  if (e.kind == RT_REC_COPY) p[n++] = (uint64_t *)&e.src;
#define X_N(f)
#define X_G(f) if (e.gemm.f & LP_PTR) e.gemm.f = base + (e.gemm.f & ~LP_PTR);
#define X_S(f) if (e.sdpa.f & LP_PTR) e.sdpa.f = base + (e.sdpa.f & ~LP_PTR);
  if (e.kind == RT_REC_GEMM) RT_GEMM_FIELDS(X_N, X_G, X_N)
  if (e.kind == RT_REC_SDPA) RT_SDPA_FIELDS(X_N, X_S, X_N)
  for (int i = 0; i < n; i++)
    if (*p[i] & LP_PTR) *p[i] = base + (*p[i] & ~LP_PTR);
  return e;
}

/* Plays section r with the recorder on and compares what it recorded with the program's records. */
static void check(RtPlayer *pl, RtDevice *d, RtRecorder *rec, const LaunchProgram *lp, LpRange r, const char *what, int id) {
  int before = rec->n;
  rec->on = 1;
  if (rt_player_play(pl, r) != RT_OK) printf("FAIL %s %d: %s\n", what, id, d->err), fails++;
  rec->on = 0;
  if (rec->n - before != r.count) {
    printf("FAIL %s %d: %d records played, the program has %d\n", what, id, rec->n - before, r.count), fails++;
    return;
  }
  for (int i = 0; i < r.count; i++) {
    RtRec e = expected(&lp->rec[r.first + i], d, rt_player_base(pl));
    if (!rt_record_equal(&rec->r[before + i], &e)) {
      printf("FAIL %s %d: record %d is not the program's\n", what, id, i), fails++;
      const RtRec *a = &rec->r[before + i];
      if (getenv("PP_DEBUG")) {
        printf(" kind %d/%d k %d/%d nargs %d/%d grid %u/%u block %u/%u\n", a->kind, e.kind, a->k, e.k, a->nargs, e.nargs, a->grid[0], e.grid[0], a->block, e.block);
        for (int j = 0; j < a->nargs; j++) printf("  arg %d %llx %llx\n", j, (unsigned long long)a->arg[j], (unsigned long long)e.arg[j]);
      }
      return;
    }
  }
}

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: program_play DIR\n"), 2;
  char path[PATH_MAX], err[512] = "";
  snprintf(path, sizeof path, "%s/%s", argv[1], STEPC_IMAGE_FILE);
  StepImage im;
  if (image_read(path, &im, err, sizeof err) != 0) return fprintf(stderr, "program_play: %s\n", err), 1;
  if (!im.has_program) {
    int why = im.f.cuda_refusal[0] != 0;
    printf("%s: no launch program: %s\n", argv[1], why ? im.f.cuda_refusal : "and no reason given");
    image_free(&im);
    return why ? 0 : 1;
  }
  RtDevice d;
  RtRecorder rec;
  rt_record_open(&d, &rec, im.f.sm_count);
  d.gen = &im.gen;
  const LaunchProgram *lp = &im.lp;
  RtPlayer *pl = rt_player_new(&d, lp);
  if (!pl) return fprintf(stderr, "program_play: %s\n", d.err), 1;
  check(pl, &d, &rec, lp, lp->f.init, "init", 0);
  for (int mb = 0; mb < lp->f.nmb; mb++) {
    check(pl, &d, &rec, lp, lp->micro[2 * mb], "begin", mb);
    for (int q = 0; q < im.micro_points; q++) check(pl, &d, &rec, lp, lp->point[q].rec, "point", q);
    check(pl, &d, &rec, lp, lp->micro[2 * mb + 1], "end", mb);
  }
  for (int q = im.micro_points; q < im.npoints; q++) check(pl, &d, &rec, lp, lp->point[q].rec, "point", q);
  printf("%s: %d records played as the program holds them (%d points, %d micro-batches, %lld B allocation, %lld B scratch)\n",
         argv[1], rec.n, im.npoints, lp->f.nmb, (long long)lp->f.alloc_bytes, (long long)lp->f.scratch_bytes);
  rt_player_free(pl);
  rt_recorder_free(&rec);
  image_free(&im);
  return fails ? 1 : 0;
}
