"""``hadar report DIR``: a Markdown and/or HTML report of a run's or an experiment's output folder.

A run folder (``hadar run --out`` / ``hadar simulate``-style: ``summary.json``, ``jobs.csv``,
``events.jsonl``) gives its summary, per-job table and model quality; a ``hadar compare --out``
folder (``compare.json`` + one run folder per policy) its table and plots; an experiment folder
(``hadar experiment hadare --out``: ``experiment.json`` + one run folder per policy and seed) gives
the side-by-side table over seeds. Plots (``metrics/plots.py``, rendered from the files, never from
live objects): JCT CDF, utilization over time, placement timeline, and final model quality per job.
"""

from __future__ import annotations

import argparse
import csv
import html
import json
from pathlib import Path
from typing import Any

from hadar.errors import InputError

SUMMARY_KEYS = ("policy", "jobs", "jobs_completed", "makespan_s", "avg_jct_s", "median_jct_s", "utilization",
                "rounds", "restarts", "failed_leases", "forked_job_rounds", "overhead_fraction", "wall_s")


def add_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="Markdown/HTML report with plots of a run's or experiment's output folder",
                       description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("dir", type=Path, help="output folder of `hadar run --out` or `hadar experiment ... --out`")
    p.add_argument("--format", choices=("md", "html", "both"), default="md", help="default md")
    p.add_argument("--out", type=Path, help="folder for report.md/report.html and plots (default: DIR)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    paths = write_report(args.dir, args.out, args.format)
    for p in paths:
        print(p)
    return 0


def write_report(folder: Path, out: Path | None = None, fmt: str = "md") -> list[Path]:
    """Render the report of ``folder`` into ``out`` (default ``folder``); returns the files written."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"report: {folder} is not a folder")
    out = Path(out or folder)
    plots = out / "plots"
    kinds = (("experiment.json", _experiment), ("compare.json", _compare), ("summary.json", _run))
    render = next((f for name, f in kinds if (folder / name).is_file()), None)
    if render is None:
        raise InputError(f"report: {folder} has none of summary.json (a run), compare.json (hadar compare --out) "
                         "and experiment.json (an experiment)")
    plots.mkdir(parents=True, exist_ok=True)
    blocks = render(folder, plots)
    written = []
    if fmt in ("md", "both"):
        written.append(out / "report.md")
        written[-1].write_text(_markdown(blocks, out))
    if fmt in ("html", "both"):
        written.append(out / "report.html")
        written[-1].write_text(_html(blocks, out))
    return written


# ---- reading ------------------------------------------------------------------------------------------
def _load_run(folder: Path) -> tuple[dict[str, Any], list[dict[str, str]], list[dict[str, Any]]]:
    summary = json.loads((folder / "summary.json").read_text())
    rows = list(csv.DictReader((folder / "jobs.csv").open())) if (folder / "jobs.csv").is_file() else []
    events = ([json.loads(line) for line in (folder / "events.jsonl").open() if line.strip()]
              if (folder / "events.jsonl").is_file() else [])
    return summary, rows, events


def _num_gpus(events: list[dict[str, Any]]) -> int:
    """GPUs seen in the round log (the highest id used + 1)."""
    return 1 + max((g for e in events if e.get("event") == "round" for le in e["leases"] for g in le[2]), default=0)


def _f(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


# ---- one run ----------------------------------------------------------------------------------------------
def _run(folder: Path, plots: Path) -> list[tuple[str, Any]]:
    from hadar.metrics import plots as P

    summary, rows, events = _load_run(folder)
    name = summary.get("policy", folder.name)
    blocks: list[tuple[str, Any]] = [("h1", f"Run report: {folder.name} ({name})")]
    blocks.append(("table", (["metric", "value"], [[k, _fmt(summary[k])] for k in SUMMARY_KEYS if k in summary])))
    if rows:
        cols = [c for c in ("job_id", "job_type", "total_steps", "jct_s", "restarts", "metric", "quality_initial",
                            "quality_final") if c in rows[0]]
        blocks += [("h2", "Jobs"), ("table", (cols, [[_fmt(_f(r[c]) if c != "job_id" and _f(r[c]) is not None
                                                           else r[c]) for c in cols] for r in rows]))]
    n = _num_gpus(events)
    blocks.append(("h2", "Plots"))
    blocks.append(("img", P.jct_cdf({name: [_f(r.get("jct_s")) for r in rows]}, plots / "jct_cdf.png")))
    if events:
        blocks.append(("img", P.utilization({name: P.utilization_series(events, n)}, plots / "utilization.png")))
        tl = P.placement_timeline(events, [f"GPU {g}" for g in range(n)], plots / "placement.png", title=name)
        if tl is not None:
            blocks.append(("img", tl))
    q = {f"{r['job_id']} {r['job_type'].split(' ')[0]}": _f(r.get("quality_final")) for r in rows}
    if any(v is not None for v in q.values()):
        blocks.append(("img", _quality_plot({name: q}, plots / "quality.png")))
    return blocks


# ---- hadar compare --out ------------------------------------------------------------------------------------
def _compare(folder: Path, plots: Path) -> list[tuple[str, Any]]:
    from hadar.compare import format_table
    from hadar.metrics import plots as P

    results = json.loads((folder / "compare.json").read_text()).get("results", [])
    blocks: list[tuple[str, Any]] = [("h1", f"Compare report: {folder.name}"), ("pre", format_table(results))]
    jcts: dict[str, list[float | None]] = {}
    series = {}
    loaded = {r["policy"]: _load_run(folder / r["policy"]) for r in results
              if (folder / r["policy"] / "summary.json").is_file()}
    n = max((_num_gpus(events) for _, _, events in loaded.values()), default=1)
    for name, (_, rows, events) in loaded.items():
        jcts[name] = [_f(x.get("jct_s")) for x in rows]
        if events:
            series[name] = P.utilization_series(events, n)
    blocks.append(("h2", "Plots"))
    if jcts:
        blocks.append(("img", P.jct_cdf(jcts, plots / "jct_cdf.png")))
    if series:
        blocks.append(("img", P.utilization(series, plots / "utilization.png")))
    return blocks


# ---- an experiment ----------------------------------------------------------------------------------------
def _experiment(folder: Path, plots: Path) -> list[tuple[str, Any]]:
    from hadar.metrics import plots as P
    from hadar.runtime.experiment import LABELS, format_table

    exp = json.loads((folder / "experiment.json").read_text())
    blocks: list[tuple[str, Any]] = [("h1", f"Experiment report: {folder.name}"), ("pre", format_table(exp))]
    jcts: dict[str, list[float | None]] = {}
    series = {}
    quality: dict[str, dict[str, float | None]] = {}
    first_seed = exp["seeds"][0]
    timelines = []
    for pol in exp["policies"]:
        label = LABELS.get(pol, pol)
        t = exp["table"][pol]["quality"]
        quality[label] = {f"{j} {q['job_type'].split(' ')[0]}": q["mean"] for j, q in t.items()}
        for r in exp["runs"]:
            if r["policy"] != pol or not r.get("dir") or not (Path(r["dir"]) / "summary.json").is_file():
                continue
            _, rows, events = _load_run(Path(r["dir"]))
            jcts.setdefault(label, []).extend(_f(x.get("jct_s")) for x in rows)
            if r["seed"] == first_seed and events:
                n = _num_gpus(events)
                series[f"{label} (seed {first_seed})"] = P.utilization_series(events, n)
                tl = P.placement_timeline(events, [f"GPU {g}" for g in range(n)], plots / f"placement_{pol}.png",
                                          title=f"{label}, seed {first_seed}")
                if tl is not None:
                    timelines.append(tl)
    blocks.append(("h2", "Plots"))
    if jcts:
        blocks.append(("img", P.jct_cdf(jcts, plots / "jct_cdf.png")))
    if series:
        blocks.append(("img", P.utilization(series, plots / "utilization.png")))
    blocks += [("img", t) for t in timelines]
    blocks.append(("img", _quality_plot(quality, plots / "quality.png")))
    return blocks


def _quality_plot(quality: dict[str, dict[str, float | None]], path: Path) -> Path:
    """Grouped bars: final held-out metric per job, one bar per policy (metrics differ per job: read per job)."""
    import numpy as np

    from hadar.metrics.plots import _plt

    plt = _plt()
    jobs = list(dict.fromkeys(j for q in quality.values() for j in q))
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(jobs)), 3.5))
    width = 0.8 / max(1, len(quality))
    for i, (name, q) in enumerate(quality.items()):
        vals = [q.get(j) if q.get(j) is not None else 0.0 for j in jobs]
        ax.bar(np.arange(len(jobs)) + i * width, vals, width, label=name)
    ax.set_xticks(np.arange(len(jobs)) + 0.4 - width / 2)
    ax.set_xticklabels(jobs, fontsize=7)
    ax.set_ylabel("final held-out metric (accuracy / recall: higher; perplexity: lower)", fontsize=7)
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---- rendering -------------------------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def _rel(path: Path, base: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)


def _markdown(blocks: list[tuple[str, Any]], base: Path) -> str:
    out = []
    for kind, x in blocks:
        if kind == "h1":
            out.append(f"# {x}\n")
        elif kind == "h2":
            out.append(f"## {x}\n")
        elif kind == "pre":
            out.append(f"```\n{x}\n```\n")
        elif kind == "table":
            cols, rows = x
            out.append("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
            out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
            out.append("")
        elif kind == "img":
            out.append(f"![{Path(x).stem}]({_rel(x, base)})\n")
    return "\n".join(out) + "\n"


def _html(blocks: list[tuple[str, Any]], base: Path) -> str:
    e = html.escape
    out = [("<!doctype html><html><head><meta charset='utf-8'><title>hadar report</title>"
           "<style>body{font-family:sans-serif;max-width:60em;margin:auto}td,th{border:1px solid #ccc;"
           "padding:2px 6px}table{border-collapse:collapse}</style></head><body>")]
    for kind, x in blocks:
        if kind in ("h1", "h2"):
            out.append(f"<{kind}>{e(x)}</{kind}>")
        elif kind == "pre":
            out.append(f"<pre>{e(x)}</pre>")
        elif kind == "table":
            cols, rows = x
            out.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in cols) + "</tr>"
                       + "".join("<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in r) + "</tr>" for r in rows)
                       + "</table>")
        elif kind == "img":
            out.append(f"<p><img src='{e(_rel(x, base))}' alt='{e(Path(x).stem)}'></p>")
    return "\n".join(out) + "</body></html>\n"
