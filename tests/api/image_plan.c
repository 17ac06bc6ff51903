/* image_plan DIR — what the built step.img holds of the plan, as `stepc plan --json` names it:
 * {"peak_bytes": .., "arena_bytes": .., "region_bytes": .., "layout_digest": ".."}. artifact.sh
 * compares it with `stepc plan --json` of the same recipe: the plan reported is the plan built. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>

#include "fingerprint.h"
#include "runtime/image.h"

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: image_plan DIR\n"), 2;
  char path[PATH_MAX], err[512] = "";
  snprintf(path, sizeof path, "%s/%s", argv[1], STEPC_IMAGE_FILE);
  StepImage im;
  if (image_read(path, &im, err, sizeof err) != 0) return fprintf(stderr, "image_plan: %s\n", err), 1;
  const Graph *g = im.g;
  printf("{\"peak_bytes\": %" PRId64 ", \"arena_bytes\": %" PRId64 ", \"region_bytes\": %" PRId64
         ", \"layout_digest\": \"%016" PRIx64 "\"}\n",
         im.f.cuda_peak, g->buffer_bytes[0], g->nbuffers > 1 ? g->buffer_bytes[1] : 0, plan_layout_digest(g));
  image_free(&im);
  return 0;
}
