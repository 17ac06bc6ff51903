/* image_plan DIR — what the built step.img holds of the plan, as `stepc plan --json` names it:
 * {"held_bytes", "arena_bytes", "region_bytes", "layout_digest", "scratch_bytes",
 * "device_peak_bytes", "program_records", "program_digest"}. artifact.sh compares it with `stepc
 * plan --json` of the same recipe: the plan reported, launch program included, is the plan built. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>

#include "plan/fingerprint.h"
#include "plan/plan.h"
#include "runtime/image.h"

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: image_plan DIR\n"), 2;
  char path[PATH_MAX], err[512] = "";
  snprintf(path, sizeof path, "%s/%s", argv[1], STEPC_IMAGE_FILE);
  StepImage im;
  char digest[17];
  if (image_read(path, &im, err, sizeof err) != 0) return fprintf(stderr, "image_plan: %s\n", err), 1;
  const Graph *g = im.g;
  const LpFacts *lf = &im.lp.f;
  /* what the plan's buffers hold (the arena and the optimizer-state region): the device peak less what
   * it adds (the scratch and the libraries' workspaces) */
  int64_t scratch = im.has_program ? lf->scratch_bytes : 0, libs = im.has_program ? RT_BLAS_WORKSPACE_BYTES + lf->attn_workspace : 0;
  printf("{\"held_bytes\": %" PRId64 ", \"arena_bytes\": %" PRId64 ", \"region_bytes\": %" PRId64
         ", \"layout_digest\": \"%016" PRIx64 "\", \"scratch_bytes\": %" PRId64 ", \"device_peak_bytes\": %" PRId64
         ", \"program_records\": %d, \"program_digest\": \"%s\"}\n",
         im.f.cuda_peak - scratch - libs, g->buffer_bytes[0], g->nbuffers > 1 ? g->buffer_bytes[1] : 0, plan_layout_digest(g), scratch,
         im.f.cuda_peak, im.has_program ? lf->nrec : 0, im.has_program ? program_digest_hex(&im.lp, digest) : "");
  image_free(&im);
  return 0;
}
