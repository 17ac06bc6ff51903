/* sweep.h — `stepc sweep`: the matched-control table of recompute candidates (sweep.c). */
#ifndef STEPC_SWEEP_H
#define STEPC_SWEEP_H

#include "report/report.h"

enum { SWEEP_OK = 0, SWEEP_LOAD = 1, SWEEP_INVALID = 2, SWEEP_ERROR = 3 };

/* Plans the control and each candidate (";"-separated; NULL = the default set). budget <= 0: no
 * budget. *rows_out is malloc'd; *cheapest is the fastest row that fits (-1 none). Diagnostics of
 * loading and validating the base recipe go to d. */
int sweep_run(const char *recipe, const char *const *overrides, int noverrides, const char *candidates,
              double budget, SweepRow **rows_out, int *nrows, int *cheapest, DiagList *d);

#endif
