"""``hadar replay``: a trace's jobs as submissions to the service's store, run with the simulated executor
and a virtual clock, resumable after the process dies (``service/replay.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hadar.errors import InputError

_UNSUPPORTED = ("window", "restart_s", "fork_estimate", "limit")


def add_parser(sub: Any) -> None:
    from hadar.cli_simulate import DEFAULT_POLICY, add_output_args, add_workload_args

    p = sub.add_parser("replay", help="replay a trace's submissions through the service's store (resumable)",
                       description="Store the workload's jobs as the service would, run them with the simulated "
                       "executor and a virtual clock, and commit every round to the store with the state a restart "
                       "continues from. Run it again on the same --state after the process died and it goes on "
                       "from the last committed round, with the same decisions as an uninterrupted run.")
    p.add_argument("--state", type=Path, required=True, help="the store's folder (created if missing)")
    p.add_argument("--policy", default=DEFAULT_POLICY, help="policy name (see `hadar policies`)")
    add_workload_args(p)
    add_output_args(p)
    from hadar.runconfig import add_config_arg

    add_config_arg(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from hadar.cli import emit_json
    from hadar.cli_simulate import format_summary, load_inputs, progress_bar
    from hadar.service.replay import ReplayOptions, replay

    if args.gavel_compat:
        raise InputError("hadar replay does not take --gavel-compat")
    source, cluster, table, kwargs = load_inputs(args)
    given = [k for k in _UNSUPPORTED if k in kwargs] + (["rate_model"] if kwargs["world"].rate_model != "sync" else [])
    if given or not isinstance(source, list):
        raise InputError("hadar replay takes a trace, or --generate with --num-jobs: not --"
                         + ({"fork_estimate": "fork_efficiency"}.get(given[0], given[0]).replace("_", "-") if given
                            else "window"))
    with progress_bar(len(source), f"replay {args.policy}", args) as bar:
        result = replay(ReplayOptions(args.state, tuple(source), cluster, table, policy=args.policy,
                                      round_s=kwargs["round_s"], seed=kwargs["seed"], progress=bar.update))
    if args.out is not None:
        from hadar.sim.run import SimResult, write_outputs

        write_outputs(SimResult(result.summary, result.rows, [], None, {}), args.out)
    if args.json:
        emit_json({**result.summary, "resumed": result.resumed})
    else:
        print(format_summary(result.summary, state=args.state, resumed=result.resumed))
    return 0
