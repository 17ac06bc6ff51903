/* program_play DIR — the launch program of DIR's step.img, played by the runtime's player
 * (runtime/cuda/player.h) on a recording device: what it launches must be the program, record for
 * record, each pointer relocated against the step's allocation — the initialisation, every
 * micro-batch's begin, micro program and end, then the tail. Each point is played as the runtime
 * plays it (rt_player_point): its records, or after the attention_backend=auto fallback (which
 * STEPC_TEST_CUDNN_NO_ENGINE=1 forces here) its flash alternative. Prints the counts, the attention
 * the player chose ("attention: cudnn" / "attention: flash" / "attention: none", then the notice if
 * any on its own line) and a digest of everything played; exit 0 when equal, 1 on a difference, an
 * unreadable image or a player that does not open (its message on stderr). An image without a
 * program must say why. */
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
#define X_C(f) if (e.coll.f & LP_PTR) e.coll.f = base + (e.coll.f & ~LP_PTR);
  if (e.kind == RT_REC_GEMM) RT_GEMM_FIELDS(X_N, X_G, X_N)
  if (e.kind == RT_REC_SDPA) RT_SDPA_FIELDS(X_N, X_S, X_N)
  if (e.kind == RT_REC_COLL) RT_COLL_FIELDS(X_N, X_C, X_N)
  for (int i = 0; i < n; i++)
    if (*p[i] & LP_PTR) *p[i] = base + (*p[i] & ~LP_PTR);
  return e;
}

/* Plays section r (point q through rt_player_point when q >= 0) with the recorder on and compares
 * what it recorded with the program's records r. */
static void check(RtPlayer *pl, RtDevice *d, RtRecorder *rec, const LaunchProgram *lp, LpRange r, const char *what, int id, int q) {
  int before = rec->n;
  rec->on = 1;
  if ((q >= 0 ? rt_player_point(pl, q) : rt_player_play(pl, r)) != RT_OK) printf("FAIL %s %d: %s\n", what, id, d->err), fails++;
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

/* FNV-1a of a record's call, field by field (a struct's padding is not part of it). */
static uint64_t rec_hash(uint64_t h, const RtRec *r) {
#define H(v) (h = ir_fnv1a(h, &(v), sizeof(v)))
  H(r->kind);
  switch (r->kind) {
  case RT_REC_LAUNCH:
    H(r->k), H(r->grid), H(r->block), H(r->smem), H(r->nargs);
    h = ir_fnv1a(h, r->arg, (size_t)r->nargs * sizeof r->arg[0]);
    break;
#define HG(f) H(r->gemm.f);
#define HS(f) H(r->sdpa.f);
#define HC(f) H(r->coll.f);
  case RT_REC_GEMM: RT_GEMM_FIELDS(HG, HG, HG) break;
  case RT_REC_SDPA: RT_SDPA_FIELDS(HS, HS, HS) break;
  case RT_REC_COLL: RT_COLL_FIELDS(HC, HC, HC) break;
#undef HC
#undef HG
#undef HS
  case RT_REC_MEMSET:
  case RT_REC_COPY: H(r->dst), H(r->src), H(r->bytes); break;
  case RT_REC_FORK:
  case RT_REC_JOIN: break;
  }
#undef H
  return h;
}

/* The records point q plays: its flash alternative after the auto fallback, else its own. */
static LpRange point_range(const LaunchProgram *lp, int q, int flash) {
  return flash && lp->point[q].alt.count ? lp->point[q].alt : lp->point[q].rec;
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
  int flash = rt_player_flash_fallback(pl);
  check(pl, &d, &rec, lp, lp->f.init, "init", 0, -1);
  for (int mb = 0; mb < lp->f.nmb; mb++) {
    check(pl, &d, &rec, lp, lp->micro[2 * mb], "begin", mb, -1);
    for (int q = 0; q < im.micro_points; q++) check(pl, &d, &rec, lp, point_range(lp, q, flash), "point", q, q);
    check(pl, &d, &rec, lp, lp->micro[2 * mb + 1], "end", mb, -1);
  }
  for (int q = im.micro_points; q < im.npoints; q++) check(pl, &d, &rec, lp, point_range(lp, q, flash), "point", q, q);
  int sdpa = 0, alts = 0;
  for (int i = 0; i < rec.n; i++) sdpa += rec.r[i].kind == RT_REC_SDPA;
  for (int q = 0; q < im.npoints; q++) alts += lp->point[q].alt.count > 0;
  if (flash && sdpa) printf("FAIL: the flash fallback played %d cuDNN calls\n", sdpa), fails++;
  /* what was played, pointers as launched: equal digests, equal launches */
  uint64_t h = IR_FNV_OFFSET;
  for (int i = 0; i < rec.n; i++) h = rec_hash(h, &rec.r[i]);
  printf("%s: %d records played as the program holds them (%d points, %d micro-batches, %lld B allocation, %lld B scratch)\n",
         argv[1], rec.n, im.npoints, lp->f.nmb, (long long)lp->f.alloc_bytes, (long long)lp->f.scratch_bytes);
  printf("attention: %s (%d cuDNN calls played, %d points with a flash alternative)\n", sdpa ? "cudnn" : flash || lp->f.attn == LP_ATTN_FLASH ? "flash" : "none", sdpa, alts);
  if (rt_player_notice(pl)[0]) printf("notice: %s\n", rt_player_notice(pl));
  printf("played digest %016llx\n", (unsigned long long)h);
  rt_player_free(pl);
  rt_recorder_free(&rec);
  image_free(&im);
  return fails ? 1 : 0;
}
