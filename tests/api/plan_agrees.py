"""plan_agrees.py PLAN ARTIFACT_PLAN NAME — `stepc plan --json` of a recipe and the plan.json of the
artifact built from it (tests/api/tp.sh, ep.sh) report the same per-rank memory: every rank row's
params and max_allocated_bytes (a TP or EP artifact's step graph is one rank's shard; its plan.json
must not be that shard divided by TP or EP again)."""
import json, sys

a, b, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
ra, rb = a["ranks"], b["ranks"]
if len(ra) != len(rb):
    sys.exit(f"{name}: stepc plan has {len(ra)} rank rows, the artifact's plan.json {len(rb)}")
for x, y in zip(ra, rb):
    for k in ("params", "max_allocated_bytes"):
        if x[k] != y[k]:
            sys.exit(f"{name}: rank {x['name']} {k}: stepc plan {x[k]}, the artifact's plan.json {y[k]}")
print(f"ok: {name}: the artifact's plan.json = stepc plan per rank "
      f"({ra[0]['params']} params, max allocated {ra[0]['max_allocated_bytes']} B on {ra[0]['name']})")
