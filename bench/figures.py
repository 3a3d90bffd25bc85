#!/usr/bin/env python3
"""Write the simulator's measurement file (slurm-ft-figures/1) from the benches' saved outputs.

    python bench/recovery.py --path hot-spare --nodes 8 --faults 5 --breaker-share 0.9 --save hot-8.json
    ... (16, 32, 64 nodes; --path requeue at 8 and 64 nodes)
    python bench/hang.py --hangs 3 --hang-timeout 10 --nodes 4 --json > hang.json
    python bench/figures.py --base slurm_ft/data/figures-lab.json --recovery hot-*.json requeue-*.json \
                            --hang hang.json > figures.json

Each measured figure is the median over the runs that measured it (each run's own figure is its p50
over its faults); each curve point is the median over the runs at its node count. The configured and stated
figures, the job's and the levers' come from --base unchanged. The file records when and where it was
measured: the date, this machine (CPU, cores, memory), the Slurm version the benches reported, and each
run's load average. `slurm-ft sim --figures FILE` reads it (a site's own file needs only the figures it
measured; the rest come from the file slurm-ft ships).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_ft.plan import figures as fg        # noqa: E402


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    return f"{platform.node()}: {os.cpu_count()} cores ({cpu}), {mem_gb:.0f} GiB, {platform.system()} {platform.release()}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="a figures file: its configured and stated entries are kept")
    ap.add_argument("--recovery", nargs="+", default=[], help="bench/recovery.py --save/--json outputs")
    ap.add_argument("--hang", nargs="*", default=[], help="bench/hang.py --json outputs")
    ap.add_argument("--date", default=time.strftime("%Y-%m-%d"))
    ap.add_argument("--note", default="", help="free text for the measured section (e.g. the machine's load)")
    a = ap.parse_args(argv)

    base = json.loads(Path(a.base).read_text())
    fg.parse(json.dumps(base), a.base)               # refuse a bad base before writing anything
    values: dict = {}
    points: dict = {}
    runs = []
    versions = set()
    for path in a.recovery:
        data = json.loads(Path(path).read_text())
        got, curve = fg.from_recovery_bench(data, path)
        for name, v in got.items():
            values.setdefault(name, []).append((v, path))
        for name, (n, v) in curve.items():
            points.setdefault(name, {}).setdefault(n, []).append((v, path))
        versions.add(data.get("slurm", {}).get("version", "?"))
        lab = data["lab"]
        runs.append({"file": Path(path).name, "path": data["path"], "training_nodes": lab["nodes"] - lab["hot_spares"],
                     "hot_spares": lab["hot_spares"], "faults": data["faults"],
                     "fault_to_first_step_p50_s": data["slurm_ft"]["fault_to_first_step_p50_s"],
                     "load_average": [lab.get("load_average_start"), lab.get("load_average_1m")]})
    for path in a.hang:
        data = json.loads(Path(path).read_text())
        for name, v in fg.from_hang_bench(data, path).items():
            values.setdefault(name, []).append((v, path))
        runs.append({"file": Path(path).name, "path": "hang", "training_nodes": data.get("nodes"),
                     "hang_timeout_s": data.get("hang_timeout_s"), "hangs": data.get("hangs"),
                     "first_step_after_p50_s": data["phases_since_stall_s"]["first step after"]["p50"]})
    figures = dict(base.get("figures", {}))
    for name, vals in sorted(values.items()):
        v = statistics.median(x for x, _ in vals)
        src = {"hang_check_s": "bench/hang.py --json: checks done - hang detected, p50"}.get(
            name, "bench/recovery.py --json, the phase's p50 over its faults")
        figures[name] = {"s": round(v, 3), "kind": "measured",
                         "source": f"{src}; median of {len(vals)} run(s): {', '.join(Path(p).name for _, p in vals)}"}
    curves = dict(base.get("curves", {}))
    for name, pts in sorted(points.items()):
        old = curves.get(name, {})
        curves[name] = {"points": fg.curve_points([(n, statistics.median(v for v, _ in runs_n))
                                                   for n, runs_n in pts.items()]),
                        "use": old.get("use", sorted(pts)) if set(old.get("use", [])) <= set(pts) else sorted(pts),
                        "kind": "measured",
                        "source": old.get("source", f"bench/recovery.py, the {name} phase's p50 at each node count")}
    out = {"format": fg.FORMAT,
           "measured": {"date": a.date, "machine": machine(), "slurm": ", ".join(sorted(versions)) or "?",
                        "runs": runs, **({"note": a.note} if a.note else {})},
           "figures": figures, "curves": curves, "job": base.get("job", {}), "levers": base.get("levers", {})}
    if base.get("note"):
        out["note"] = base["note"]
    text = json.dumps(out, indent=1) + "\n"
    f = fg.parse(text, "the output")
    gaps = fg.missing(f)
    if gaps:
        print(f"bench/figures.py: the result lacks {', '.join(gaps)}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
