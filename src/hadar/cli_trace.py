"""``hadar trace import philly|csv|sia``: a public cluster trace as a hadar CSV job list (docs/traces.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    p = sub.add_parser("trace", help="import a public cluster trace (Philly, Helios, Alibaba PAI, ...) as a job list",
                       description="Turn a real cluster trace into a CSV job list for --trace (docs/traces.md).")
    what = p.add_subparsers(dest="trace_command", metavar="ACTION", parser_class=type(p))
    imp = what.add_parser("import", help="convert a trace into a CSV job list")
    fmt = imp.add_subparsers(dest="trace_format", metavar="FORMAT", parser_class=type(p))
    philly = fmt.add_parser("philly", help="Microsoft's Philly job table (timestamp,duration,num_gpus,...,cluster)",
                            description="Real arrivals, GPU counts and durations of one virtual cluster (or all); "
                            "seeded job types; steps so a job's best-type time equals its real duration.")
    philly.add_argument("file", type=Path, help="the job table, e.g. ../shared/real-traces/philly.csv")
    philly.add_argument("--vc", help="only this virtual cluster (the `cluster` column's hash, e.g. 6214e9)")
    generic = fmt.add_parser("csv", help="any CSV trace, with a column mapping",
                             description="A CSV trace whose columns --map names: submission time (seconds, or an "
                             "ISO date and time), GPUs, seconds run, optionally the job type.")
    generic.add_argument("file", type=Path, help="the trace, a CSV file with a header")
    generic.add_argument("--map", required=True, metavar="KEY=COL,...",
                         help="arrival=COL,gpus=COL,duration=COL[,job_type=COL]")
    generic.add_argument("--where", action="append", default=[], metavar="COL=VALUE",
                         help="keep only rows whose COL equals VALUE (repeatable)")
    for q in (philly, generic):
        _add_common(q)
    sia = fmt.add_parser("sia", help="a Sia (SOSP'23) workload with its model profiles",
                         description="A Sia workload (name,time,application,num_replicas,batch_size) as rigid "
                         "(default), scale-gpus or adaptive jobs: OUT/trace.csv (with restart_s), "
                         "OUT/throughputs.json, OUT/cluster.yaml (docs/sia.md).")
    sia.add_argument("file", type=Path, help="the workload, e.g. SIA_DIR/workloads/philly/workload-1.csv")
    sia.add_argument("--sia-dir", type=Path, required=True, help="Sia's sia-simulator folder (its traces/ profiles)")
    sia.add_argument("--out-dir", type=Path, required=True, help="folder to write trace.csv, throughputs.json, "
                     "cluster.yaml into")
    sia.add_argument("--jobs", default="rigid", choices=("rigid", "scale-gpus", "adaptive"),
                     help="every job rigid (default, as Sia's rigid jobs), scale-gpus (its GPU count may vary "
                     "from 1 to its own, its batch stays: Sia's meaning) or adaptive (its count and its batch "
                     "both vary); scale-gpus and adaptive imply --efficiency")
    sia.add_argument("--efficiency", action="store_true",
                     help="write each job's efficiency profile (noise scale over its progress, from Sia's "
                     "gradient statistics): steps in reference steps, credited by the gain at the batch used")
    for q in (p, imp, philly, generic):
        q.set_defaults(func=run_trace)
    sia.set_defaults(func=run_sia)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--start", default="", metavar="DATE",
                   help="first submission to keep (an ISO date/time, or seconds as in the file); default: the first")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--days", type=float, help="keep the jobs submitted within N days of the start")
    size.add_argument("--jobs", type=int, help="keep the first N jobs from the start")
    p.add_argument("--seed", type=int, default=0, help="seed of the job-type assignment (default 0)")
    p.add_argument("--throughputs", help="throughput table the job types and steps come from "
                   "(default: the bundled simulation table; `physical` for the physical one)")
    p.add_argument("--out", type=Path, required=True, help="the CSV job list to write")


def run_trace(args: argparse.Namespace) -> int:
    from hadar.errors import InputError
    from hadar.model.throughput import ThroughputTable
    from hadar.sim.importers import PHILLY, PHILLY_GROUP, Selection, import_trace, parse_map, parse_where, write_rows

    if getattr(args, "trace_format", None) is None:
        raise InputError("usage: hadar trace import philly|csv|sia FILE ... --out OUT.csv (hadar trace import --help)")
    where: tuple[tuple[str, str], ...]
    if args.trace_format == "philly":
        columns, where = PHILLY, ((PHILLY_GROUP, args.vc.strip()),) if args.vc else ()
    else:
        columns, where = parse_map(args.map), parse_where(args.where)
    table = ThroughputTable.load(args.throughputs)
    selection = Selection(where=where, start=args.start, days=args.days, jobs=args.jobs)
    rows = import_trace(args.file, columns, selection, table, seed=args.seed)
    if args.out.parent != Path() and not args.out.parent.is_dir():
        raise InputError(f"--out: folder not found: {args.out.parent}")
    write_rows(rows, args.out)
    span_h = float(rows[-1]["arrival_s"]) / 3600.0
    print(f"wrote {len(rows)} jobs ({span_h:.2f} h of arrivals) to {args.out}", file=sys.stderr)
    return 0


def run_sia(args: argparse.Namespace) -> int:
    from hadar.errors import InputError
    from hadar.sim.sia_import import import_sia, write_import

    if not args.sia_dir.is_dir():
        raise InputError(f"--sia-dir: folder not found: {args.sia_dir}")
    rows, table = import_sia(args.file, args.sia_dir, jobs=args.jobs, efficiency=args.efficiency)
    write_import(rows, table, args.out_dir)
    span_h = max(float(r["arrival_s"]) for r in rows) / 3600.0
    print(f"wrote {len(rows)} jobs ({span_h:.2f} h of arrivals), throughputs.json and cluster.yaml to {args.out_dir}",
          file=sys.stderr)
    return 0
