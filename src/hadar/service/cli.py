"""``hadar serve`` (the scheduler as a service) and its client: ``submit``, ``status``, ``cancel``, ``logs``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hadar.errors import InputError

DEFAULT_PORT = 8470


def add_parser(sub: Any) -> None:
    from hadar.cli_simulate import add_profiles_arg
    from hadar.runtime.cli import DEFAULT_POLICY, add_fork_efficiency_arg

    p = sub.add_parser("serve", help="run the scheduler as a service: jobs submitted over HTTP, a live dashboard",
                       description="A long-running scheduler (the same engine, policies and Ray runtime as `hadar "
                       "run`) fed by jobs submitted while it runs; state in SQLite under --state, so a restart "
                       "(even after kill -9) resumes every job. With no cluster options it emulates the demo "
                       "cluster on this machine. The API and the dashboard (http://HOST:PORT/) need the token "
                       "made at the first start (DIR/token).")
    p.add_argument("--state", required=True, type=Path, help="state directory (database, token, checkpoints)")
    p.add_argument("--cluster", help="cluster file or shorthand (v100=2,k80=1); default: the demo cluster, or "
                   "detected from the Ray nodes with --address")
    p.add_argument("--gpus-per-node", type=int, default=1, help="GPUs per node for the shorthands (default 1)")
    p.add_argument("--address", help="join an existing Ray cluster (HOST:PORT) instead of starting one")
    p.add_argument("--policy", default=DEFAULT_POLICY, help=f"policy or profile name (default {DEFAULT_POLICY})")
    add_profiles_arg(p)
    p.add_argument("--round-s", type=float, default=10.0, help="round length in seconds (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of models, data and planner (default 0)")
    p.add_argument("--dilation", type=float, help="emulation only: stretch every step this much more")
    add_fork_efficiency_arg(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine "
                   "only; anything else exposes the API, token-protected, to the network)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    p.set_defaults(func=serve_main)

    s = sub.add_parser("submit", help="submit a job file to a running `hadar serve`",
                       description="Submit the jobs of a job file (the same files as `hadar run --jobs`, checked "
                       "the same way before anything is stored: a relative entrypoint file is looked up in the job "
                       "file's folder, then the current one); prints the new job ids. arrival_s in the file counts "
                       "from the submission.")
    s.add_argument("file", type=Path, help="job file (.yaml/.json/.csv/.trace)")
    _where(s)
    s.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    s.set_defaults(func=submit_main)

    st = sub.add_parser("status", help="jobs of a running `hadar serve` (or one job)")
    st.add_argument("id", nargs="?", type=int, help="one job's id")
    _where(st)
    st.add_argument("--json", action="store_true", help='print {"jobs": [...]} (or one job) as JSON')
    st.set_defaults(func=status_main)

    c = sub.add_parser("cancel", help="cancel a job of a running `hadar serve`")
    c.add_argument("id", type=int)
    _where(c)
    c.set_defaults(func=cancel_main)

    lg = sub.add_parser("logs", help="a job's log: what happened to it (arrival, leases, failures, finish), what "
                        "its code printed, warnings and tracebacks")
    lg.add_argument("id", type=int)
    _where(lg)
    lg.set_defaults(func=logs_main)


def _where(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state", type=Path, help="the server's state directory (URL and token are read there)")
    p.add_argument("--server", help="the server's URL (token from $HADAR_TOKEN)")


def _client(args: argparse.Namespace) -> Any:
    from hadar.service.client import Client

    return Client.locate(args.state, args.server)


def serve_main(args: argparse.Namespace) -> int:
    from hadar.runtime.cli import require_runtime_extra
    from hadar.service.server import require_service_extra, serve

    require_runtime_extra("serve")
    require_service_extra()
    return serve(args)


def submit_main(args: argparse.Namespace) -> int:
    from hadar.cli import emit_json

    res = _client(args).submit_file(args.file)
    if args.json:
        emit_json(res)
    else:
        print(" ".join(str(i) for i in res["ids"]))
    return 0


def status_main(args: argparse.Namespace) -> int:
    from hadar.cli import emit_json

    client = _client(args)
    if args.id is not None:
        job = client.job(args.id)
        if args.json:
            emit_json(job)
        else:
            _table([job])
        return 0
    res = client.jobs()
    if args.json:
        emit_json({"jobs": res["jobs"]})
    else:
        _table(res["jobs"])
    return 0


def _table(jobs: list[dict[str, Any]]) -> None:
    print(f"{'id':>5}  {'name':<14} {'status':<10} {'progress':>8}  {'gpus':>4}  {'jct_s':>8}  held")
    for j in jobs:
        print(f"{j['id']:>5}  {j['name'][:14]:<14} {j['status']:<10} {100 * j['progress']:>7.1f}%  {j['gpus']:>4}  "
              f"{j['jct_s']:>8.1f}  {','.join(map(str, j['held_gpus'])) or '-'}"
              + (f"  {j['failure']}" if j["failure"] else ""))


def cancel_main(args: argparse.Namespace) -> int:
    res = _client(args).cancel(args.id)
    print(f"job {res['id']}: {res['status']}")
    return 0


def logs_main(args: argparse.Namespace) -> int:
    for line in _client(args).logs(args.id)["lines"]:
        print(line)
    return 0


def check_serve_args(args: argparse.Namespace) -> None:
    if not 0 < args.round_s < float("inf"):
        raise InputError(f"--round-s must be a positive number, got {args.round_s}")
    if not 0 <= args.port <= 65535:
        raise InputError(f"--port must be in 0..65535, got {args.port}")
    if args.dilation is not None and not 1 <= args.dilation < float("inf"):
        raise InputError(f"--dilation must be at least 1, got {args.dilation}")
