#!/usr/bin/env python3
"""`stepc trace` nests on every track: `trace_nesting.py STEPC`.

Perfetto (and chrome://tracing) draw the complete events ("ph": "X") of one (pid, tid) track as a
stack: an event must lie inside the one it starts in, or after it. An event that starts inside its
predecessor and ends after it goes to an overflow track, and a timeline of thousands of ops that
each overlap the last by a rounding error renders as a stack a hundred deep. For a dense model
(bench_m) and MoE ones (moonlight_mla_7l, moonlight_16b): every complete event on a track is
disjoint from or properly inside every other (by the integers Perfetto reads: timestamps in
nanoseconds), no complete event has zero or negative duration (a zero-cost op is an instant,
"ph": "i"), every op of the step is on the timeline exactly once per drawn micro-batch, and the
micro-batch slices tile the micro program's op slices end to end."""
import json, os, subprocess, sys, tempfile
from collections import defaultdict
from decimal import Decimal
from checks import check, finish

stepc = sys.argv[1]


def ns(v):
    """A trace timestamp (µs, a JSON number) as the integer nanoseconds a viewer reads; None when
    it is not a whole number of nanoseconds."""
    d = Decimal(str(v)) * 1000
    return int(d) if d == d.to_integral_value() else None


OPS = ("forward", "backward", "replay", "reduce", "optimizer")
for recipe in ("models/bench_m.lua", "models/moonlight_mla_7l.lua", "models/moonlight_16b.lua"):
    with tempfile.TemporaryDirectory(prefix="stepc_trace_") as tmp:
        out = os.path.join(tmp, "t.json")
        p = subprocess.run([stepc, "trace", recipe, "-o", out], capture_output=True, timeout=120)
        check(p.returncode == 0, f"{recipe}: trace exit {p.returncode}: {p.stderr.decode()[-1000:]}")
        if p.returncode != 0:
            continue
        with open(out, "rb") as f:
            ev = json.loads(f.read().decode("utf-8"))["traceEvents"]
    tracks = defaultdict(list)
    nslices = ninstant_ops = 0
    for e in ev:
        if e.get("ph") == "X":
            a, d = ns(e["ts"]), ns(e["dur"])
            check(a is not None and d is not None, f"{recipe}: {e['name']!r} at ts {e['ts']} dur {e['dur']}: not whole ns")
            if a is None or d is None:
                continue
            check(d > 0, f"{recipe}: {e['name']!r} at ts {e['ts']} has duration {e['dur']}")
            tracks[(e["pid"], e["tid"])].append((a, a + d, e["name"]))
            nslices += 1
        elif e.get("ph") == "i" and e.get("cat") in OPS:
            ninstant_ops += 1
            check("args" in e and "op" in e["args"], f"{recipe}: op instant without args: {e}")
    bad = 0
    for key, v in tracks.items():
        # by start, the longer first: each event must end by the end of every open event it starts in
        v.sort(key=lambda x: (x[0], -x[1]))
        stack = []
        for a, b, name in v:
            while stack and stack[-1][1] <= a:
                stack.pop()
            if stack and b > stack[-1][1]:
                bad += 1
                if bad <= 5:
                    print(f"  {recipe} track {key}: {name!r} [{a}, {b}) ns crosses {stack[-1][2]!r} [{stack[-1][0]}, {stack[-1][1]}) ns")
            stack.append((a, b, name))
    check(bad == 0, f"{recipe}: {bad} of {nslices} slices overlap an event on their track without nesting in it")
    # the micro-batch track tiles: each micro-batch starts where the last ended
    micro = sorted(tracks.get((0, 8), []))
    check(micro and micro[0][0] == 0 and all(x[1] == y[0] for x, y in zip(micro, micro[1:])), f"{recipe}: micro-batches do not tile: {micro[:3]}")
    # micro-batch 0's forward / backward / replay op slices end exactly where it ends
    if micro:
        end0 = micro[0][1]
        last = max((b for k in ((0, 1), (0, 2), (0, 3)) for a, b, _ in tracks.get(k, []) if b <= end0), default=None)
        check(last == end0, f"{recipe}: micro-batch 0 ends at {end0} ns, its last op at {last} ns")
    print(f"{recipe}: {nslices} slices, {ninstant_ops} zero-cost op instants, {bad} crossing")
finish("trace_nesting")
