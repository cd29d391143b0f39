"""``hadar serve`` (the scheduler as a service) and its client: ``submit``, ``status``, ``cancel``, ``logs``,
``usage``; ``token`` makes and revokes users' tokens in a state directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hadar.errors import InputError

if TYPE_CHECKING:
    from hadar.runconfig import RunConfig

DEFAULT_PORT = 8470


def add_parser(sub: Any) -> None:
    _serve_parser(sub)
    _client_parsers(sub)
    _team_parsers(sub)


def _serve_parser(sub: Any) -> None:
    from hadar.cli_simulate import add_profiles_arg
    from hadar.runconfig import add_config_arg
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
    p.add_argument("--slurm", action="store_true", help="run the jobs on the Slurm cluster sinfo describes, not Ray "
                   "(docs/slurm.md); the state directory must be storage every node sees")
    p.add_argument("--partition", help="with --slurm: the partition hadar's jobs go to (default: every partition)")
    p.add_argument("--policy", default=DEFAULT_POLICY, help=f"policy or profile name (default {DEFAULT_POLICY})")
    add_profiles_arg(p)
    p.add_argument("--round-s", type=float, default=10.0, help="round length in seconds (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of models, data and planner (default 0)")
    p.add_argument("--dilation", type=float, help="emulation only: stretch every step this much more")
    add_fork_efficiency_arg(p)
    _tenant_args(p)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine "
                   "only; anything else exposes the API, token-protected, to the network)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any free one)")
    add_config_arg(p)
    p.set_defaults(func=serve_main)


def _client_parsers(sub: Any) -> None:
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


def _tenant_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tenants", type=Path, metavar="FILE", help="tenants file (YAML: teams with weight, quota per "
                   "GPU type, borrow; users with team or admin): users' tokens (`hadar token create`) see and "
                   "cancel their team's jobs only; reloaded on SIGHUP or POST /api/tenants/reload (docs/api.md)")
    p.add_argument("--min-run-s", type=float, default=60.0, metavar="S", help="with --tenants: a job running on "
                   "borrowed GPUs keeps them at least this long before their owner's team gets them back "
                   "(default 60)")


def _team_parsers(sub: Any) -> None:
    """``hadar token`` and ``hadar usage``."""
    tk = sub.add_parser("token", help="create or revoke a user's API token (a server run with --tenants)",
                        description="`hadar token create USER --state DIR` prints a new token for USER (the store "
                        "keeps only its SHA-256); `hadar token revoke USER --state DIR` revokes all of USER's "
                        "tokens (their next request gets 401). Both are in the audit log. Clients send the token "
                        "from $HADAR_TOKEN.")
    tk.add_argument("action", choices=("create", "revoke"))
    tk.add_argument("user")
    tk.add_argument("--state", required=True, type=Path, help="the server's state directory")
    tk.add_argument("--tenants", type=Path, metavar="FILE", help="check that USER is in this tenants file")
    tk.set_defaults(func=token_main)

    u = sub.add_parser("usage", help="GPU-seconds per team, user, job and GPU type, from the recorded rounds "
                       "(on Slurm with accounting: from sacct)")
    u.add_argument("--team", help="this team's jobs only (a user's token: always their own team)")
    u.add_argument("--since", help="rounds from this date or ISO time on (UTC unless it names a zone)")
    fmt = u.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    fmt.add_argument("--csv", action="store_true", help="print level,name,team,gpu_type,gpu_s rows")
    _where(u)
    u.set_defaults(func=usage_main)


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


def token_main(args: argparse.Namespace) -> int:
    from hadar.service.auth import new_user_token, token_digest
    from hadar.service.store import Store
    from hadar.service.tenants import load_tenants

    if not args.state.is_dir():
        raise InputError(f"--state {args.state}: no such directory (has `hadar serve --state {args.state}` run?)")
    if args.tenants is not None and load_tenants(args.tenants, None).user(args.user) is None:
        raise InputError(f"user {args.user!r} is not in {args.tenants}")
    if not args.user or len(args.user) > 64 or not all(c.isalnum() or c in "-_." for c in args.user):
        raise InputError(f"user {args.user[:64]!r}: 1-64 letters, digits, '-', '_' or '.'")
    store = Store(args.state)
    try:
        if args.action == "create":
            token = new_user_token()
            store.add_token(args.user, token_digest(token), by="cli")
            print(token)
        else:
            n = store.revoke_tokens(args.user, by="cli")
            print(f"{args.user}: {n} token{'s' if n != 1 else ''} revoked")
    finally:
        store.close()
    return 0


def usage_main(args: argparse.Namespace) -> int:
    import json as json_mod

    res = _client(args).usage(args.team, args.since, "csv" if args.csv else "json")
    if args.csv:
        print(res, end="")
        return 0
    if args.json:
        print(json_mod.dumps(res))
        return 0
    print(f"{'team':<14} {'gpu_type':<10} {'gpu_hours':>10}")
    for team, rec in sorted(res["teams"].items()):
        for t, sec in sorted(rec["by_type"].items()):
            print(f"{team or '-':<14} {t:<10} {sec / 3600:>10.3f}")
    print(f"{'total':<14} {'':<10} {res['gpu_s'] / 3600:>10.3f}")
    source = res.get("source", "rounds")
    print("source: " + ("Slurm's accounting (sacct's typed records of the ended leases)" if source == "sacct"
                        else "the recorded rounds"))
    return 0


def serve_config(args: argparse.Namespace) -> RunConfig:
    """``hadar serve``'s flags and ``--config`` file as the one ``RunConfig`` (``runconfig.from_training_args``:
    round length, port, dilation, ... checked there), plus what only the service refuses; ``InputError``."""
    from hadar.runconfig import from_training_args

    config = from_training_args(args)
    train = config.training
    assert train is not None  # from_training_args makes it
    if train.slurm and (config.run.cluster or train.address or train.dilation):
        raise InputError("--cluster, --address and --dilation do not apply to --slurm (sinfo says what the cluster is)")
    return config
