/* data.h — where micro-batches come from when the trainer binds none: mock tokens drawn from the
 * seed, or windows of a text file's bytes (data.path). A pure function of (seed, step, micro), so
 * replays, resumes and the CPU and CUDA devices see the same batches. */
#ifndef STEPC_CPU_DATA_H
#define STEPC_CPU_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/cpu/exec.h"

/* Fills tokens and targets (B*T each) for (step, micro). */
typedef struct CpuData {
  int (*fill)(struct CpuData *d, int64_t step, int64_t micro, int64_t b, int64_t t, int32_t *tokens,
              int32_t *targets);
  void (*free)(struct CpuData *d);
  uint64_t seed;
  int64_t vocab;
  bool fixed;    /* the same batch every step (overfitting tests) */
  uint8_t *text; /* text: one window of the file (seq_length + 1 bytes), read with pread; NULL for mock */
  int64_t ntext; /* text: the file's size at open (windows are drawn below it) */
  int64_t nwin;  /* text: the window's capacity */
  int fd;        /* text: the open file (never mapped: a file truncated during the run is an error,
                    not a SIGBUS) */
  char err[512]; /* why fill last returned -1 ("" when it gave no reason) */
} CpuData;

/* path NULL: mock tokens uniform in [0, vocab) from seed; else windows of seq_length + 1 bytes of
 * the file at offsets drawn from the seed (vocab must be >= 256). The path is read as given: any
 * regular file the user can read (a FIFO, a directory or a device is refused, never waited on); it
 * stays open and each window is read when drawn, so the file is never held in memory.
 * 0, or -1 with a message. */
int cpu_data_open(CpuData *d, uint64_t seed, int64_t vocab, int64_t seq_length, const char *path, char *err,
                  size_t nerr);
/* Draws micro-batch (step, micro) from d into the staging buffers tok/tg (B*T each) and copies it
 * into the graph's token and target tensors. 0, or -1 when the data source fails (d->err says why:
 * a data.path file that shrank since it was opened is such a failure). */
int cpu_data_feed(CpuExec *e, const Graph *g, CpuData *d, int64_t step, int64_t micro, int32_t *tok,
                  int32_t *tg);
/* The targets among tg's n that the loss keeps: those in [0, vocab) (ir/ops/loss.c; any other,
 * PyTorch's ignore_index -100 for one, masks its token). */
int64_t cpu_data_count_kept(const int32_t *tg, int64_t n, int64_t vocab);
/* The kept targets of a step's micro-batches micro[0..nmb) (global indices), each drawn from d into
 * tok/tg (B*T each): what the step's loss denominator counts before the step runs. 0, or -1 (d->err). */
int cpu_data_kept(CpuData *d, int64_t step, const int64_t *micro, int nmb, int64_t b, int64_t t, int32_t *tok,
                  int32_t *tg, int64_t *kept);

#endif
