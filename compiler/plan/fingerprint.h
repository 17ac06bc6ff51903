/* fingerprint.h — the step's identity, carried in step.img and checkpoints. */
#ifndef STEPC_FINGERPRINT_H
#define STEPC_FINGERPRINT_H

#include <stdint.h>

#include "ir.h"

/* A hash of the op sequence in program order (kinds, phases, modules, attributes, tensor
 * shapes and dtypes): equal for the CPU and CUDA plans of one recipe, different when the step
 * changes. Offsets are not in it (the CPU plan is at 4 bytes per float). */
uint64_t step_fingerprint(const Graph *g);

/* A hash of every tensor's name, buffer, offset and bytes in id order: the layout a plan applied
 * to g (memplan_apply). `stepc plan --json` reports it; the built step.img's graph gives the same. */
uint64_t plan_layout_digest(const Graph *g);

#endif
