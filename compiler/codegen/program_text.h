/* program_text.h — program.txt: the launch program a build stored in step.img (runtime/program.h),
 * listed for people: the allocation and its scratch parts, then the initialisation, each
 * micro-batch's begin and end, and every program point's records under its op (kind, module,
 * phase, layer), each call with its literal arguments. Nothing reads it back. */
#ifndef STEPC_PROGRAM_TEXT_H
#define STEPC_PROGRAM_TEXT_H

#include <stdio.h>

#include "plan/plan.h"

/* 0, or -1 on a write error. */
int program_text_write(const Plan *p, FILE *f);

#endif
