#!/usr/bin/env python3
"""The report files parse whatever the recipe's path and strings hold: `reports.py STEPC`.

A recipe in a folder named with XML markup and a byte that is not UTF-8, which prints a string
that is not UTF-8 either: the SVG must be XML (its title escaped), every --json output and the
trace must be JSON that a strict UTF-8 decoder accepts; the SVG marks the phases, and the trace
names its process and gives each op slice its bytes, FLOPs and tensor shapes."""
import json, math, os, re, shutil, subprocess, sys, tempfile
import xml.etree.ElementTree as ET
from checks import check, finish

stepc = sys.argv[1]


def run(*args):
    p = subprocess.run([stepc] + list(args), capture_output=True, timeout=120)
    check(p.returncode == 0, f"{args[0]} exit {p.returncode}: {p.stderr.decode('utf-8', 'replace')[-2000:]}")
    return p


def strict_json(data, what):
    try:
        return json.loads(data.decode("utf-8"))  # strict: invalid UTF-8 raises
    except ValueError as e:
        check(False, f"{what} is not JSON in UTF-8: {e}")
        return None


tmp = tempfile.mkdtemp(prefix="stepc_reports_")
try:
    folder = os.path.join(tmp.encode(), b"a&b<c>\"q\"\xff")
    os.mkdir(folder)
    recipe = os.path.join(folder, b"r.lua")
    with open(recipe, "wb") as f:
        f.write(b'local cfg = stepc.recipe("tiny")\nprint("odd \\255\\254 bytes")\nreturn cfg\n')
    svg, trace = os.path.join(tmp, "m.svg"), os.path.join(tmp, "t.json")
    run(b"plan", recipe, b"--svg", svg.encode())
    root = ET.parse(svg).getroot()  # raises on unescaped markup or invalid UTF-8
    ns = "{http://www.w3.org/2000/svg}"
    title = root.find(ns + "title")
    check(title is not None and "a&b<c>\"q\"\ufffd/r.lua" in title.text, f"svg title: {title.text if title is not None else None!r}")
    texts = [t.text for t in root.iter(ns + "text")]
    panels = {g.get("id"): g for g in root.iter(ns + "g") if g.get("class") == "panel"}
    check(sorted(panels) == ["all", "transient"], f"svg panels: {sorted(panels)}")
    for name, g in panels.items():
        phases = [t.text for t in g.iter(ns + "text") if t.get("class") == "phase"]
        check(phases == ["forward", "backward", "optimizer"], f"svg {name} phase marks: {phases}")
        ticks = [float(t.text) for t in g.iter(ns + "text") if t.get("class") == "tick"]
        check(len(ticks) >= 3 and ticks[0] == 0, f"svg {name} ticks: {ticks}")
        steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
        step = steps.pop() if len(steps) == 1 else 0
        mant = step / 10 ** math.floor(math.log10(step)) if step > 0 else 0  # 1, 2 or 5 times a power of ten
        check(any(abs(mant - m) < 1e-6 for m in (1, 2, 5)), f"svg {name} ticks are not round: {ticks}")
        # the panel's own maximum fills its scale: it is not squashed under another panel's
        peak = [t.text for t in g.iter(ns + "text") if t.get("class") == "peak"]
        most = float(re.search(r"(?:peak|most) ([0-9.]+) [MG]B", peak[0]).group(1)) if peak else 0
        check(ticks and most > 0 and most >= 0.5 * ticks[-1], f"svg {name}: maximum {most} on an axis up to {ticks[-1:]}")
    check(any("a&b<c>" in (t or "") for t in texts), "svg heading")

    for verb in (b"plan", b"check"):
        d = strict_json(run(verb, recipe, b"--json").stdout, verb.decode() + " --json")
        if d is None:
            continue
        notes = [g for g in d["diagnostics"] if g["rule"] == "PRINT"]
        check(len(notes) == 1 and notes[0]["message"] == "odd \ufffd\ufffd bytes", f"{verb} PRINT note: {notes}")
        if verb == b"plan":
            check(d["recipe"].endswith("\ufffd/r.lua"), f"plan recipe: {d['recipe']!r}")

    run(b"trace", recipe, b"-o", trace.encode())
    with open(trace, "rb") as f:
        t = strict_json(f.read(), "trace")
    if t is not None:
        ev = t["traceEvents"]
        pn = [e for e in ev if e.get("name") == "process_name"]
        check(len(pn) == 1 and pn[0]["args"]["name"].startswith("stepc plan: ") and "\ufffd" in pn[0]["args"]["name"], f"process name: {pn}")
        ops = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("forward", "backward", "replay", "reduce", "optimizer")]
        check(len(ops) > 50, f"{len(ops)} op slices")
        bad = [e for e in ops if not ("args" in e and e["args"]["bytes"] > 0 and e["args"]["flops"] >= 0 and e["args"]["outputs"])]
        check(not bad, f"op slices without args: {bad[:2]}")
        mm = [e for e in ops if e["args"]["op"] == "linear"]
        check(mm and mm[0]["args"]["flops"] > 0 and "[" in mm[0]["args"]["inputs"][0], f"a linear's args: {mm[:1]}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
finish("reports")
