"""Hadar, HadarE and Gavel's LAS on the evaluation sets (docs/evaluation.md): `--set dev` to choose
defaults on, `--set heldout` to report.

The sets are `hadar.evaluation`'s (Philly windows drawn by its rules, generated workloads at several
loads). Each workload runs through `hadar compare`'s own code, in this process: Hadar,
`max_min_fairness_perf` (LAS, the baseline), HadarE with ideal forking and again with
`--fork-efficiency calibrated` (the `hadare-calibrated` row), and `isolated` for finish-time
fairness. Prints, per workload, avg and p99 JCT, TTD, FTF max, utilization and each policy's ratios
to LAS, with LAS's stretch (its avg JCT over the JCT bound); then which of the goals hold:

- `jct`: Hadar's avg JCT <= LAS's, and <= 0.97x LAS's where LAS's stretch > 1.10;
- `p99`: Hadar's p99 JCT <= 1.05x LAS's;
- `ftf`: Hadar's FTF max <= max(2, 1.05x LAS's);
- `calibrated`: `hadare-calibrated`'s avg JCT and TTD <= Hadar's.

The Philly windows need Microsoft's Philly job table (default `../shared/real-traces/philly.csv`
beside the checkout, `--philly FILE`; docs/traces.md says where to get it); before running, the
bench checks against it that no window shares a job with a Philly workload used elsewhere in the
project (`hadar.evaluation.USED_PHILLY`). `--out DIR` writes DIR/SET.json and DIR/SET.csv. A
progress bar on stderr on a terminal. `--parallel N` runs each workload's simulations in N processes.
`--fork-efficiency NAME` sets the world every row runs in (default `calibrated`; `noise-scale`,
`noise-scale-split`: the noise-scale fork model, whose `hadare-calibrated` row plans with it).
`--policies A,B --profiles FILE` runs other rows (LAS is always added), e.g. Hadar variants a
profile file names: each row but LAS's and HadarE's gets the `jct`, `p99` and `ftf` goals as if it
were Hadar's, and the summary counts them per variant.

    .venv/bin/python bench/bench_heldout.py --set dev|heldout [--only NAME,NAME] [--philly FILE]
        [--out DIR] [--parallel N] [--fork-efficiency NAME] [--policies A,B --profiles FILE]
    .venv/bin/python bench/bench_heldout.py --markdown DIR/SET.json    # the tables of docs/evaluation.md
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from hadar.compare import compare
from hadar.errors import HadarError
from hadar.evaluation import SETS, USED_PHILLY, Workload, import_window, workloads
from hadar.sim.importers import PHILLY, PHILLY_GROUP, Selection, import_trace

ROOT = Path(__file__).resolve().parents[1]
#: ../shared/real-traces/philly.csv beside the checkout (or beside the folder holding it, for a git worktree)
PHILLY_FILE = next((p for p in (ROOT.parent / "shared/real-traces/philly.csv",
                                ROOT.parent.parent / "shared/real-traces/philly.csv") if p.is_file()),
                   ROOT.parent / "shared/real-traces/philly.csv")
POLICIES = "hadar,max_min_fairness_perf,hadare"
LAS, HADAR, CALIBRATED = "max_min_fairness_perf", "hadar", "hadare-calibrated"
GOALS = ("jct", "p99", "ftf", "calibrated")
EPS = 1e-9  # relative slack for "no worse than": equal figures pass
COLUMNS = (("avg JCT h", "avg_jct_s", 3600), ("p99 JCT h", "p99_jct_s", 3600), ("TTD h", "makespan_s", 3600),
           ("FTF max", "ftf_max", 1), ("util", "utilization", 1))
RATIOS = (("JCT/LAS", "avg_jct_s"), ("p99/LAS", "p99_jct_s"), ("TTD/LAS", "makespan_s"), ("FTF/LAS", "ftf_max"))


class Runs(NamedTuple):
    """How each workload runs: the world's fork credit, the policies (LAS added if absent) and a
    profile file naming variants, each workload's simulations in ``parallel`` processes."""

    fork: str = "calibrated"
    policies: str = POLICIES
    profiles: Path | None = None
    parallel: int = 1


DEFAULT_RUNS = Runs()


def compare_args(w: Workload, trace: Path | None, runs: Runs = DEFAULT_RUNS) -> argparse.Namespace:
    """``hadar compare``'s parsed arguments for workload ``w`` (the CLI's own parser)."""
    from hadar.cli import build_parser

    names = runs.policies.split(",")
    policies = ",".join(names if LAS in names else [*names, LAS])
    argv = ["compare", *w.compare_argv(trace), "--policies", policies, "--fork-efficiency", runs.fork,
            "--parallel", str(runs.parallel), *(["--profiles", str(runs.profiles)] if runs.profiles else [])]
    return build_parser("compare").parse_args(argv)


def measure(w: Workload, philly: Path, folder: Path, runs: Runs = DEFAULT_RUNS) -> dict[str, Any]:
    """Run ``w`` as ``hadar compare`` does; its jobs, and per policy row the summary with FTF."""
    trace = import_window(w, philly, folder) if w.philly else None
    results, _, _ = compare(compare_args(w, trace, runs))
    rows = {r["policy"]: r for r in results}
    return {"jobs": rows[LAS]["jobs"], "results": rows}


def variant_goals(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, bool]]:
    """The `jct`, `p99` and `ftf` goals of every row but LAS's and HadarE's, as if it were Hadar's
    (the rows of a `--policies` list of Hadar variants)."""
    out = {}
    for name, row in rows.items():
        if name != LAS and not name.startswith("hadare"):
            ok = goals({**rows, HADAR: row})
            out[name] = {g: ok[g] for g in GOALS[:3]}
    return out


def goals(rows: dict[str, dict[str, Any]]) -> dict[str, bool]:
    """The issue's goals on one workload (the module docstring); a goal whose rows were not run holds."""
    if HADAR not in rows:
        return dict.fromkeys(GOALS, True)
    h, las = rows[HADAR], rows[LAS]
    cal = rows.get(CALIBRATED, h)

    def at_most(a: float, b: float) -> bool:
        return a <= b * (1 + EPS)

    jct = at_most(h["avg_jct_s"], las["avg_jct_s"]) and (
        las["stretch"] <= 1.10 or at_most(h["avg_jct_s"], 0.97 * las["avg_jct_s"]))
    return {"jct": jct,
            "p99": at_most(h["p99_jct_s"], 1.05 * las["p99_jct_s"]),
            "ftf": at_most(h["ftf_max"], max(2.0, 1.05 * las["ftf_max"])),
            "calibrated": at_most(cal["avg_jct_s"], h["avg_jct_s"]) and at_most(cal["makespan_s"], h["makespan_s"])}


def shared_jobs(philly: Path, chosen: Sequence[Workload]) -> list[str]:
    """Where a chosen window shares a job (a row of the table) with a used Philly workload: one line each."""
    from hadar.model.throughput import ThroughputTable

    table = ThroughputTable.load()
    used: dict[str, set[int]] = {}
    for vc, start, jobs, days in USED_PHILLY:
        pick = Selection(where=((PHILLY_GROUP, vc),), start=start, jobs=jobs or None, days=days or None)
        try:
            rows = import_trace(philly, PHILLY, pick, table)
        except HadarError:  # not in this table (another copy, or a test's)
            continue
        used.setdefault(vc, set()).update(int(r["source_row"]) for r in rows)
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for w in (w for w in chosen if w.philly):
            with import_window(w, philly, Path(tmp)).open(newline="") as f:
                lines = {int(r["source_row"]) for r in csv.DictReader(f)}
            if lines & used.get(w.vc, set()):
                out.append(f"{w.name}: {len(lines & used[w.vc])} job(s) of a Philly workload used elsewhere")
    return out


def table(name: str, m: dict[str, Any], ok: dict[str, bool]) -> str:
    """One workload's table: a row per policy, then its goals."""
    rows = m["results"]
    las = rows[LAS]
    head = f"{'policy':22} " + " ".join(f"{c[0]:>10}" for c in (*COLUMNS, *RATIOS))
    lines = [f"{name}: {m['jobs']} jobs, LAS's stretch {las['stretch']:.3f}", head]
    for policy, r in rows.items():
        cells = [r[k] / div for _, k, div in COLUMNS] + [r[k] / las[k] if las[k] else float("nan") for _, k in RATIOS]
        lines.append(f"{policy:22} " + " ".join(f"{c:10.3f}" for c in cells))
    lines.append("goals: " + ", ".join(f"{g} {'ok' if ok[g] else 'XX'}" for g in GOALS))
    return "\n".join(lines)


def summary(which: str, measured: dict[str, dict[str, Any]]) -> str:
    """Per goal: on how many workloads it holds, and where it misses."""
    n = len(measured)
    lines = [f"{which} set, {n} workloads: goals held"]
    for g in GOALS:
        missed = [name for name, m in measured.items() if not m["goals"][g]]
        lines.append(f"  {g:10} {n - len(missed)}/{n}" + (f"  (missed: {', '.join(missed)})" if missed else ""))
    variants = list(next(iter(measured.values()), {}).get("variant_goals", {}))
    if len(variants) > 1:
        lines.append("per variant: goals held (jct p99 ftf), geometric mean of avg JCT / LAS's, worst FTF max")
        for v in variants:
            held = [sum(m["variant_goals"][v][g] for m in measured.values()) for g in GOALS[:3]]
            ratios = [m["results"][v]["avg_jct_s"] / m["results"][LAS]["avg_jct_s"] for m in measured.values()]
            ftf = max(m["results"][v]["ftf_max"] for m in measured.values())
            lines.append(f"  {v:22} {' '.join(f'{h:2}/{n}' for h in held)}  {math.prod(ratios) ** (1 / n):.4f}"
                         f"  {ftf:.3f}")
    return "\n".join(lines)


SHORT = {LAS: "LAS", HADAR: "Hadar", "hadare": "HadarE", CALIBRATED: "HadarE, calibrated"}


def markdown(doc: dict[str, Any]) -> str:
    """A written SET.json as docs/evaluation.md's tables: the figures, then the goals per workload."""
    head = ["workload", "policy", *(c[0] for c in COLUMNS), *(r[0] for r in RATIOS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for entry in doc["workloads"]:
        rows, first = entry["results"], True
        las = rows[LAS]
        for policy, r in rows.items():
            name = f"{entry['workload']['name']} ({entry['jobs']} jobs, LAS stretch {las['stretch']:.3f})"
            cells = [f"{r[k] / div:.3f}" for _, k, div in COLUMNS] + [f"{r[k] / las[k]:.3f}" for _, k in RATIOS]
            lines.append(f"| {name if first else ''} | {SHORT.get(policy, policy)} | " + " | ".join(cells) + " |")
            first = False
    lines += ["", "| workload | " + " | ".join(GOALS) + " |", "|---|" + "---|" * len(GOALS)]
    for entry in doc["workloads"]:
        lines.append(f"| {entry['workload']['name']} | "
                     + " | ".join("ok" if entry["goals"][g] else "**missed**" for g in GOALS) + " |")
    held = [sum(e["goals"][g] for e in doc["workloads"]) for g in GOALS]
    lines.append("| **held on** | " + " | ".join(f"{h} of {len(doc['workloads'])}" for h in held) + " |")
    return "\n".join(lines)


def write(out: Path, which: str, chosen: Sequence[Workload], measured: dict[str, dict[str, Any]],
          info: dict[str, Any]) -> list[Path]:
    """DIR/SET.json (everything) and DIR/SET.csv (a row per workload and policy)."""
    out.mkdir(parents=True, exist_ok=True)
    doc = {"set": which, **info, "workloads": [
        {"workload": {f: getattr(w, f) for f in w.__dataclass_fields__}, "command": w.command(), **measured[w.name]}
        for w in chosen if w.name in measured]}
    js = out / f"{which}.json"
    js.write_text(json.dumps(doc, indent=1) + "\n")
    keys = ["avg_jct_s", "p99_jct_s", "makespan_s", "ftf_max", "ftf_mean", "utilization", "stretch",
            "avg_queuing_delay_s", "jct_vs_baseline", "ttd_vs_baseline"]
    cv = out / f"{which}.csv"
    with cv.open("w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["workload", "policy", "jobs", *keys, *GOALS])
        for name, m in measured.items():
            for policy, r in m["results"].items():
                wr.writerow([name, policy, m["jobs"], *(r.get(k) for k in keys), *(m["goals"][g] for g in GOALS)])
    return [js, cv]


def run_set(which: str, chosen: Sequence[Workload], philly: Path,
            runs: Runs = DEFAULT_RUNS) -> dict[str, dict[str, Any]]:
    """Measure every workload, printing its table as it finishes; a progress bar on a terminal."""
    from tqdm import tqdm

    measured: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp, tqdm(total=len(chosen), desc=f"{which} set", unit="workload",
                                                    file=sys.stderr, disable=not sys.stderr.isatty()) as bar:
        for w in chosen:
            bar.set_postfix_str(w.name)
            t0 = time.monotonic()
            m = measure(w, philly, Path(tmp), runs)
            m["goals"] = goals(m["results"])
            m["variant_goals"] = variant_goals(m["results"])
            m["wall_s"] = round(time.monotonic() - t0, 1)
            measured[w.name] = m
            bar.write(table(w.name, m, m["goals"]) + f"\n({m['wall_s']} s)\n", file=sys.stdout)
            bar.update(1)
    return measured


def main(argv: list[str] | None = None) -> int:
    from hadar.sweep import workers_count

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=SETS, help="dev (to tune on) or heldout (to report)")
    ap.add_argument("--markdown", type=Path, metavar="SET.json", help="print a written SET.json as markdown tables "
                    "(docs/evaluation.md's) and run nothing")
    ap.add_argument("--only", default="", help="comma-separated workload names of the set (default: all)")
    ap.add_argument("--philly", type=Path, default=PHILLY_FILE, help="Philly's job table")
    ap.add_argument("--out", type=Path, help="write DIR/SET.json and DIR/SET.csv")
    ap.add_argument("--parallel", type=workers_count, default=1, metavar="N",
                    help="each workload's simulations in N local processes (default 1)")
    ap.add_argument("--fork-efficiency", default="calibrated", metavar="NAME", help="the world's fork credit, as "
                    "`hadar compare --fork-efficiency` (default calibrated; noise-scale, noise-scale-split, a file)")
    ap.add_argument("--policies", default=POLICIES, help=f"comma-separated policies or profile names (default "
                    f"{POLICIES}; LAS is added if absent): Hadar variants for the dev set")
    ap.add_argument("--profiles", type=Path, help="a profile file naming variants (docs/policies.md)")
    args = ap.parse_args(argv)
    if args.markdown is not None:
        print(markdown(json.loads(args.markdown.read_text())))
        return 0
    if args.set is None:
        ap.error("--set dev|heldout is required (or --markdown SET.json)")
    only = {n.strip() for n in args.only.split(",") if n.strip()}
    chosen = [w for w in workloads(args.set) if not only or w.name in only]
    try:
        unknown = sorted(only - {w.name for w in chosen})
        if unknown:
            raise HadarError(f"no workload {unknown[0]!r} in the {args.set} set (its names: "
                             + ", ".join(w.name for w in workloads(args.set)) + ")")
        if any(w.philly for w in chosen) and not args.philly.is_file():
            raise HadarError(f"no Philly job table at {args.philly} (--philly FILE; docs/traces.md says where to "
                             "get it)")
        clash = shared_jobs(args.philly, chosen) if any(w.philly for w in chosen) else []
        if clash:
            raise HadarError("a window shares jobs with a workload used elsewhere: " + "; ".join(clash))
        t0 = time.monotonic()
        runs = Runs(args.fork_efficiency, args.policies, args.profiles, args.parallel)
        measured = run_set(args.set, chosen, args.philly, runs)
    except HadarError as e:
        print(f"bench_heldout: error: {e}", file=sys.stderr)
        return 2
    print(summary(args.set, measured))
    info = {"fork_efficiency": args.fork_efficiency, "policies": args.policies,
            "profiles": args.profiles.read_text() if args.profiles else None, "wall_s": round(time.monotonic() - t0, 1),
            "load_avg": os.getloadavg(), "cpus": os.cpu_count()}
    for p in write(args.out, args.set, chosen, measured, info) if args.out else []:
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
