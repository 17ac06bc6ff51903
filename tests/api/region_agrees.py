#!/usr/bin/env python3
"""region_agrees.py BUILD_LOG MEASURE NAME — a distributed-optimizer artifact under TP or EP: every
rank allocates the optimizer-state region the build reports for the rank's step ("build: each rank's
step: optimizer-state region ...: R B", then "shards (B): rank0 ... rankN ..." per job rank), and
each rank holds its shard (stepc_measure's optimizer_state_bytes, `test_dp measure` lines, is the
shard without the 16-byte padding after each tensor)."""
import re
import sys

log, measure, name = sys.argv[1:4]
text = open(log).read()
m = re.search(r"each rank's step: optimizer-state region [^:]*: (\d+) B", text)
assert m, f"{log} reports no region for the rank's step"
region = int(m.group(1))
shards = [int(x) for x in re.findall(r"rank\d+ (\d+)", text.split("shards (B):")[1].splitlines()[0])]
rows = [list(map(int, l.split()[1:])) for l in open(measure) if l.startswith("measure ")]
assert len(rows) == len(shards), f"{len(rows)} ranks measured, {len(shards)} shards planned"
for r, _arena, reg, state, *_ in rows:
    assert reg == region, f"rank {r}: a region of {reg} B allocated, {region} B planned"
    # at most 15 bytes of padding after each of a rank's masters and moments
    assert 0 <= shards[r] - state < 16 * 3 * 256, f"rank {r}: holds {state} B, its planned shard is {shards[r]} B"
assert max(shards) == region, "the region is not the largest shard"
print(f"ok: {name}: every rank allocates the planned {region} B region and holds its shard (B: {shards})")
