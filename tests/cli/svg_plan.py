#!/usr/bin/env python3
"""`stepc plan --svg` draws what a reader can read: `svg_plan.py STEPC`.

For a one-GPU recipe of a few MB (tiny), a one-GPU 1B (bench_m), TP8/PP8 (gpt3_paper), TP4/PP4
with interleaving and fp8 (llama3_70b_fp8) and EP8 MoE (moonlight_16b), parsing the SVG's text:

- no two text labels overlap (each label's box from its x, y, anchor and font size, at 0.6 em per
  character: what a sans-serif font needs at most for these labels, digits and lower case);
- each panel's unit is MB below 1 GB and GB otherwise, and the peak label's number in that unit is
  the peak it marks (tiny reads MB, not "0.019 GB");
- every layer the step's ops name (the trace's `args.layer`) has a mark on the x axis, at least
  twice (forward and backward);
- a sharded recipe draws its worst rank: the first panel's peak is the largest
  `ranks[].max_allocated_bytes` of `stepc plan --json`, not the single-rank plan's `arena.peak_bytes`;
  `--svg-rank single` draws the single-rank plan, `--svg-rank STAGE` that stage's rank, and a stage
  the per-rank table does not show is refused."""
import json, os, re, subprocess, sys, tempfile
import xml.etree.ElementTree as ET
from checks import check, finish

stepc = sys.argv[1]
NS = "{http://www.w3.org/2000/svg}"


def run(*args, rc=0):
    p = subprocess.run([stepc] + list(args), capture_output=True, timeout=120, text=True)
    check(p.returncode == rc, f"{' '.join(args)}: exit {p.returncode} (want {rc}): {p.stderr[-1500:]}")
    return p


def boxes(root):
    base = float(root.get("font-size", 11))
    out = []
    for t in root.iter(NS + "text"):
        s = "".join(t.itertext())
        size = float(t.get("font-size", base))
        x, y = float(t.get("x")), float(t.get("y"))
        w = len(s) * 0.6 * size
        anchor = t.get("text-anchor", "start")
        x0 = x - w if anchor == "end" else x - w / 2 if anchor == "middle" else x
        out.append((x0, y - 0.75 * size, x0 + w, y + 0.2 * size, s))
    return out


def overlaps(bs):
    bad = []
    for i, a in enumerate(bs):
        for b in bs[i + 1:]:
            if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]:
                bad.append((a[4], b[4]))
    return bad


def svg(recipe, *extra):
    with tempfile.TemporaryDirectory(prefix="stepc_svg_") as tmp:
        out = os.path.join(tmp, "m.svg")
        run("plan", recipe, "--svg", out, *extra)
        try:
            return ET.parse(out).getroot()
        except (OSError, ET.ParseError) as e:
            check(False, f"{recipe} {extra}: no SVG: {e}")
            return None


def panels(root):
    return {g.get("id"): g for g in root.iter(NS + "g") if g.get("class") == "panel"}


def peak_of(g):
    """The peak label's bytes (its data-bytes; else the number it reads) and its text."""
    pk = [t for t in g.iter(NS + "text") if t.get("class") == "peak"]
    if not pk:
        return None, None
    if pk[0].get("data-bytes") is not None:
        return float(pk[0].get("data-bytes")), pk[0].text
    m = re.match(r"(?:peak|most) ([0-9.]+) (MB|GB)", pk[0].text or "")
    return (float(m.group(1)) * (1e6 if m.group(2) == "MB" else 1e9) if m else None), pk[0].text


def layers_of(recipe):
    with tempfile.TemporaryDirectory(prefix="stepc_svg_") as tmp:
        out = os.path.join(tmp, "t.json")
        run("trace", recipe, "-o", out)
        with open(out) as f:
            ev = json.load(f)["traceEvents"]
    return {e["args"]["layer"] for e in ev if "args" in e and isinstance(e["args"].get("layer"), int) and e["args"]["layer"] >= 0}


for recipe in ("models/tiny.lua", "models/bench_m.lua", "models/gpt3_paper.lua", "models/llama3_70b_fp8.lua", "models/moonlight_16b.lua"):
    root = svg(recipe)
    if root is None:
        continue
    plan = json.loads(run("plan", recipe, "--json").stdout)
    bad = overlaps(boxes(root))
    check(not bad, f"{recipe}: {len(bad)} overlapping labels, e.g. {bad[:3]}")
    ps = panels(root)
    check(sorted(ps) == ["all", "transient"], f"{recipe}: panels {sorted(ps)}")
    for name, g in ps.items():
        most, text = peak_of(g)
        if most is None:
            check(False, f"{recipe} {name}: no peak label")
            continue
        unit = "MB" if most < 1e9 else "GB"
        check(g.get("data-unit") == unit, f"{recipe} {name}: unit {g.get('data-unit')} for a maximum of {most:.0f} B")
        units = [t.text for t in g.iter(NS + "text") if t.get("class") == "unit"]
        check(units == [unit], f"{recipe} {name}: axis unit labels {units}, want [{unit}]")
        m = re.match(r"(?:peak|most) ([0-9.]+) (MB|GB)", text or "")
        check(m and m.group(2) == unit and abs(float(m.group(1)) * (1e6 if unit == "MB" else 1e9) - most) <= 0.006 * (1e6 if unit == "MB" else 1e9),
              f"{recipe} {name}: peak label {text!r} for {most:.0f} B")
        marks = {}
        for ln in g.iter(NS + "line"):
            if ln.get("class") == "layer":
                marks[int(ln.get("data-layer"))] = marks.get(int(ln.get("data-layer")), 0) + 1
        want = layers_of(recipe)
        check(want and set(marks) == want and min(marks.values()) >= 2,
              f"{recipe} {name}: layer marks {sorted(marks)[:5]}... ({len(marks)}) for layers {sorted(want)[:5]}... ({len(want)}), fewest {min(marks.values(), default=0)}")
        named = [t.text for t in g.iter(NS + "text") if t.get("class") == "layer"]
        check(len(named) >= 2 and all(re.fullmatch(r"L\d+", s) for s in named), f"{recipe} {name}: layer labels {named[:5]}")
    heading = [t.text for t in root.iter(NS + "text") if t.get("class") == "heading"]
    check(heading and heading[0].endswith(ps["all"].get("data-unit", "?") + ")"), f"{recipe}: heading {heading[:1]}")
    drawn = peak_of(ps["all"])[0] if "all" in ps else None
    ranks = plan["ranks"]
    if plan["layout"].get("world_size", 1) > 1 or any(plan["layout"].get(k, 1) > 1 for k in ("tp", "pp", "ep", "dp")):
        worst = max(ranks, key=lambda r: r["max_allocated_bytes"])
        check(drawn is not None and abs(drawn - worst["max_allocated_bytes"]) <= 1,
              f"{recipe}: drawn peak {drawn} B, worst rank {worst['name']} max allocated {worst['max_allocated_bytes']} B "
              f"(single-rank plan {plan['arena']['peak_bytes']} B)")
        check(worst["name"] in peak_of(ps["all"])[1], f"{recipe}: peak label {peak_of(ps['all'])[1]!r} does not name {worst['name']}")
        single = svg(recipe, "--svg-rank", "single")
        if single is not None:
            d = peak_of(panels(single)["all"])[0]
            check(d == plan["arena"]["peak_bytes"], f"{recipe} --svg-rank single: drawn {d} B, plan {plan['arena']['peak_bytes']} B")
        last = ranks[-1]
        stage = re.match(r"pp(\d+)", last["name"]).group(1)
        one = svg(recipe, "--svg-rank", stage)
        if one is not None:
            d = peak_of(panels(one)["all"])[0]
            check(d is not None and abs(d - last["max_allocated_bytes"]) <= 1, f"{recipe} --svg-rank {stage}: drawn {d} B, {last['name']} {last['max_allocated_bytes']} B")
    else:
        check(drawn == plan["arena"]["peak_bytes"], f"{recipe}: drawn {drawn} B, single-rank plan {plan['arena']['peak_bytes']} B")
    print(f"{recipe}: peak {drawn:.0f} B ({ps['all'].get('data-unit')}), {len(boxes(root))} labels, none overlapping" if drawn else recipe)

# a stage the per-rank table does not show, and --svg-rank without --svg
with tempfile.TemporaryDirectory(prefix="stepc_svg_") as tmp:
    p = run("plan", "models/gpt3_paper.lua", "--svg", os.path.join(tmp, "m.svg"), "--svg-rank", "3", rc=3)
    check("0, 4, 7" in p.stderr and "not 3" in p.stderr, f"--svg-rank 3: {p.stderr.strip()!r}")
    p = run("plan", "models/tiny.lua", "--svg-rank", "single", rc=3)
    check("needs --svg" in p.stderr, f"--svg-rank without --svg: {p.stderr.strip()!r}")
finish("svg_plan")
