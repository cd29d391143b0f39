"""One run's configuration: the world, the policy and the run, frozen and checked when made.

``hadar simulate`` and ``hadar compare`` turn their flags into a ``RunConfig`` (``from_args``); a
YAML file given with ``--config FILE`` sets the same values in three sections, and flags given on
the command line override the file (``apply_config_file``; ``hadar run`` and ``hadar serve`` take
the file too, for their own flags). The file's keys are the flags' names with underscores::

    world:  {rate_model: sync, fork_efficiency: calibrated, restart_s: 30}
    policy: {name: hadar, profiles: profiles.yaml, params: {solver: highs}}
    run:    {cluster: "8:16:24", trace: max_min_fairness, round_s: 360, seed: 0, out: results}

A bad file or value (unknown key, wrong type, a negative count, a file that is not there) is one
``InputError`` line. ``docs/config.md`` documents every key.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hadar.errors import InputError
from hadar.files import read_yaml
from hadar.model.job import check_restart_s
from hadar.model.world import RATE_MODELS

DEFAULT_POLICY = "max_min_fairness_perf"
DEFAULT_CLUSTER = "8:16:24"
SECTIONS = ("world", "policy", "run")
#: file key -> flag destination, per section (keys of ``run`` are the flags' own destinations)
WORLD_KEYS = {"rate_model": "rate_model", "fork_efficiency": "fork_efficiency", "restart_s": "restart_s"}
POLICY_KEYS = {"name": "policy", "names": "policies", "profiles": "profiles", "params": "policy_params",
               "baseline": "baseline"}
#: how this invocation prints, not what runs: command line only
NOT_IN_FILE = frozenset({"help", "config", "json", "no_progress", "verbose", "quiet", "func", "command"})


@dataclass(frozen=True, slots=True)
class WorldConfig:
    """The simulated world (``model/world.World``): how a gang spanning GPU types progresses (``rate_model``),
    what forked copies are worth (``fork_efficiency``: a file, 'calibrated', 'noise-scale', 'noise-scale-split', or
    None: ideal), and the restart cost of jobs that give none (``restart_s``; None: 0). Restarts are charged except
    under ``gavel_compat``."""

    rate_model: str = "sync"
    fork_efficiency: str | None = None
    restart_s: float | None = None

    def __post_init__(self) -> None:
        if self.rate_model not in RATE_MODELS:
            raise InputError(f"rate model must be one of {', '.join(RATE_MODELS)}, got {self.rate_model!r}")
        if self.restart_s is not None:
            check_restart_s(self.restart_s, "--restart-s")


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """The policies a run names (one for simulate; compare's list, its ``baseline`` among them), the profiles
    file they may come from, and ``params`` set on top of the policy's (or its profile's) own: one policy only."""

    names: tuple[str, ...] = (DEFAULT_POLICY,)
    profiles: Path | None = None
    params: tuple[tuple[str, Any], ...] = ()
    baseline: str | None = None

    def __post_init__(self) -> None:
        if not self.names or not all(self.names):
            raise InputError("--policies needs at least one policy name")
        if len(set(self.names)) != len(self.names):
            raise InputError("--policies lists a policy twice")
        if self.params and len(self.names) != 1:
            raise InputError("policy params apply to one policy; give them in a profile (--profiles) to compare")
        if self.baseline is not None and self.baseline not in self.names:
            raise InputError(f"--baseline {self.baseline!r} is not among --policies ({', '.join(self.names)})")

    @property
    def name(self) -> str:
        return self.names[0]


@dataclass(frozen=True, slots=True)
class Workload:
    """The jobs: a trace (a file or a bundled name; None: the bundled default) or Gavel's generator."""

    trace: str | None = None
    generate: bool = False
    jobs_per_hour: float | None = None
    num_jobs: int | None = None
    window: tuple[int, int] | None = None
    multi_gpu: bool = False
    multi_priority: bool = False

    def __post_init__(self) -> None:
        if self.window is not None:
            a, b = self.window
            if a < 0 or b <= a:
                raise InputError(f"--window A B needs 0 <= A < B, got {a} {b}")
        if self.generate:
            if self.trace:
                raise InputError("give either --trace or --generate, not both")
            if self.jobs_per_hour is None:
                raise InputError("--generate needs --jobs-per-hour")
            if self.num_jobs is None and self.window is None:
                raise InputError("--generate needs --num-jobs N or --window A B")
            if self.num_jobs is not None and self.num_jobs <= 0:
                raise InputError(f"--num-jobs must be positive, got {self.num_jobs}")
            return
        for flag, value in (("jobs_per_hour", self.jobs_per_hour), ("num_jobs", self.num_jobs)):
            if value is not None:
                raise InputError(f"--{flag.replace('_', '-')} needs --generate")


@dataclass(frozen=True, slots=True)
class RunSection:
    """Where and how it runs: the cluster (a shorthand or a node file), the throughput table, the round
    length, the seed, Gavel's cadence (``gavel_compat``), the teams (``tenants``, ``min_run_s``), the output
    folder."""

    workload: Workload = Workload()
    cluster: str | None = DEFAULT_CLUSTER  # None (run, serve): the demo cluster, or what Ray's nodes say
    gpus_per_node: int = 1
    throughputs: str | None = None
    round_s: float = 360.0
    seed: int = 0
    gavel_compat: bool = False
    tenants: Path | None = None
    min_run_s: float = 0.0
    out: Path | None = None

    def __post_init__(self) -> None:
        if self.gpus_per_node <= 0:
            raise InputError(f"--gpus-per-node must be positive, got {self.gpus_per_node}")
        if not (self.round_s > 0 and math.isfinite(self.round_s)):
            raise InputError(f"--round-s must be a positive number of seconds (the round length), got {self.round_s}")
        if self.seed < 0:
            raise InputError(f"--seed must be >= 0, got {self.seed}")
        if not 0 <= self.min_run_s < float("inf"):
            raise InputError(f"--min-run-s must be a number of seconds >= 0, got {self.min_run_s}")


@dataclass(frozen=True, slots=True)
class Training:
    """What a run that trains for real (``hadar run``, ``hadar serve``) adds to the run section: the job file
    (``jobs``; None: the demo), the Ray cluster to join (``address``; None: a local, emulated one), Ray's
    dashboard host, the checkpoint folder, the emulation's ``dilation``, HadarE's ``fork_optimizer``, when space
    sharing's second workers start (``pair_workers``), Slurm instead of Ray (``slurm``, ``partition``), and the
    service's state folder, host and port."""

    jobs: str | None = None
    address: str | None = None
    dashboard: str | None = None
    checkpoint_dir: Path | None = None
    dilation: float | None = None
    fork_optimizer: str = "largest"
    pair_workers: str = "lazy"
    slurm: bool = False
    partition: str | None = None
    state: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8470

    def __post_init__(self) -> None:
        if self.dilation is not None and not (math.isfinite(self.dilation) and self.dilation >= 1):
            raise InputError(f"--dilation must be a number >= 1, got {self.dilation}")
        for flag, value, known in (("fork-optimizer", self.fork_optimizer, FORK_OPTIMIZERS),
                                   ("pair-workers", self.pair_workers, PAIR_WORKERS)):
            if value not in known:
                raise InputError(f"--{flag} must be one of {', '.join(known)}, got {value!r}")
        if self.dashboard and self.address:
            raise InputError("--dashboard applies to the local cluster only; an existing cluster has its own")
        if self.partition is not None and not self.slurm:
            raise InputError("--partition applies to --slurm runs only")
        if not 0 <= self.port <= 65535:
            raise InputError(f"--port must be in 0..65535, got {self.port}")


FORK_OPTIMIZERS = ("largest", "average")  # as runtime/aggregate.OPTIMIZER_POLICIES (tests/unit/test_runconfig.py)
PAIR_WORKERS = ("lazy", "eager")  # as runtime/run.PAIR_WORKERS


@dataclass(frozen=True, slots=True)
class RunConfig:
    """One run (or comparison) of ``hadar simulate`` / ``compare`` / ``run`` / ``serve``: world, policy, run
    (``training``: what ``run`` and ``serve`` add; None for a simulation)."""

    world: WorldConfig = WorldConfig()
    policy: PolicyConfig = PolicyConfig()
    run: RunSection = RunSection()
    training: Training | None = None


def from_args(args: argparse.Namespace) -> RunConfig:
    """The configuration of parsed ``simulate``/``compare``/``replay`` arguments (``InputError`` if bad)."""
    g = _Getter(args)
    listed = g("policies")
    names = tuple(n.strip() for n in listed.split(",") if n.strip()) if listed is not None else (
        (g("policy") or DEFAULT_POLICY),)
    window = g("window")
    workload = Workload(trace=g("trace"), generate=bool(g("generate")), jobs_per_hour=g("jobs_per_hour"),
                        num_jobs=g("num_jobs"), window=None if window is None else (int(window[0]), int(window[1])),
                        multi_gpu=bool(g("multi_gpu")), multi_priority=bool(g("multi_priority")))
    run = RunSection(workload=workload, cluster=g("cluster") or DEFAULT_CLUSTER, gpus_per_node=g("gpus_per_node", 1),
                     throughputs=g("throughputs"), round_s=g("round_s", 360.0), seed=g("seed", 0),
                     gavel_compat=bool(g("gavel_compat")), tenants=g("tenants"), min_run_s=g("min_run_s", 0.0),
                     out=g("out"))
    params = g("policy_params") or {}
    policy = PolicyConfig(names=names, profiles=g("profiles"), params=tuple(sorted(params.items())),
                          baseline=g("baseline"))
    world = WorldConfig(rate_model=g("rate_model") or "sync", fork_efficiency=g("fork_efficiency"),
                        restart_s=g("restart_s"))
    return RunConfig(world, policy, run)


def from_training_args(args: argparse.Namespace) -> RunConfig:
    """The configuration of parsed ``hadar run`` / ``hadar serve`` arguments (``InputError`` if bad): one
    policy, the world's fork efficiency, the run section (no trace: the job file is ``training.jobs``) and
    what training adds."""
    g = _Getter(args)
    run = RunSection(cluster=g("cluster"), gpus_per_node=g("gpus_per_node", 1), throughputs=g("throughputs"),
                     round_s=g("round_s", 10.0), seed=g("seed", 0), tenants=g("tenants"),
                     min_run_s=g("min_run_s", 0.0), out=g("out"))
    training = Training(jobs=g("jobs"), address=g("address"), dashboard=g("dashboard"),
                        checkpoint_dir=g("checkpoint_dir"), dilation=g("dilation"),
                        fork_optimizer=g("fork_optimizer", "largest"), pair_workers=g("pair_workers", "lazy"),
                        slurm=bool(g("slurm")), partition=g("partition"), state=g("state"),
                        host=g("host", "127.0.0.1"), port=g("port", 8470))
    policy = PolicyConfig(names=(g("policy") or DEFAULT_POLICY,), profiles=g("profiles"))
    return RunConfig(WorldConfig(fork_efficiency=g("fork_efficiency")), policy, run, training)


class _Getter:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    def __call__(self, name: str, default: Any = None) -> Any:
        value = getattr(self.args, name, None)
        return default if value is None else value


# ---- the file ----------------------------------------------------------------------------------
def add_config_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, metavar="FILE", help="YAML file of this run's settings in sections "
                   "world, policy and run (keys: the flags' names with underscores; see docs/run.md); flags given "
                   "here override the file")


def apply_config_file(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Before ``parser`` parses ``argv``: the ``--config`` file's values (if ``argv`` names one) become the
    subcommand's defaults, so flags given on the command line win. Every value is checked against its flag
    (``InputError``); a flag the file gives is no longer required on the command line."""
    path, name = _config_path(argv), next((a for a in argv if not a.startswith("-")), None)
    if path is None or name is None:
        return
    command = _subcommand(parser, name)
    if command is None or "config" not in {a.dest for a in command._actions}:
        return  # argparse says what is wrong with the command line
    values = read_config(Path(path), command)
    for action in command._actions:
        if action.dest in values and action.required:
            action.required = False  # the file gives it
    command.set_defaults(**values)


def _config_path(argv: Sequence[str]) -> str | None:
    for i, a in enumerate(argv):
        if a == "--config" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--config="):
            return a.split("=", 1)[1]
    return None


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser | None = action.choices.get(name)
            return sub
    return None


def read_config(path: Path, command: argparse.ArgumentParser) -> dict[str, Any]:
    """A config file's values, by flag destination, each checked against ``command``'s flag."""
    data = read_yaml(path, "config file")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping with sections {', '.join(SECTIONS)}")
    actions = {a.dest: a for a in command._actions if a.dest not in NOT_IN_FILE and a.option_strings}
    out: dict[str, Any] = {}
    for section, body in data.items():
        if section not in SECTIONS:
            raise InputError(f"{path}: unknown section {section!r} (known: {', '.join(SECTIONS)})")
        if not isinstance(body, dict):
            raise InputError(f"{path}: section {section} must be a mapping of keys to values")
        for key, value in body.items():
            dest = _dest(section, str(key), actions)
            if dest is None:
                known = ", ".join(sorted(_keys(section, actions)))
                raise InputError(f"{path}: unknown key {section}.{key} for `hadar {command.prog.split()[-1]}` "
                                 f"(known: {known})")
            where = f"{path}: {section}.{key}"
            out[dest] = _params(value, where) if dest == "policy_params" else _checked(value, actions[dest], where)
    return out


def _keys(section: str, actions: Mapping[str, argparse.Action]) -> list[str]:
    if section == "world":
        return [k for k, d in WORLD_KEYS.items() if d in actions]
    if section == "policy":  # params: simulate's one policy (its flags alone have no way to set them)
        return [k for k, d in POLICY_KEYS.items() if d in actions or (d == "policy_params" and "ftf" in actions)]
    own = set(WORLD_KEYS.values()) | set(POLICY_KEYS.values())
    return [d for d in actions if d not in own]


def _dest(section: str, key: str, actions: Mapping[str, argparse.Action]) -> str | None:
    if key not in _keys(section, actions):
        return None
    return {"world": WORLD_KEYS, "policy": POLICY_KEYS}.get(section, {}).get(key, key)


def _params(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise InputError(f"{where} must be a mapping of parameter names to values")
    return dict(value)


def _checked(value: Any, action: argparse.Action, where: str) -> Any:
    """``value`` as the flag's parser would have made it, or ``InputError`` (null: a flag whose default is none)."""
    if value is None and action.default is None and action.nargs != 0:
        return None
    if action.nargs == 0:  # store_true
        if not isinstance(value, bool):
            raise InputError(f"{where} must be true or false, got {value!r}")
        return value
    if isinstance(action.nargs, int):
        if not isinstance(value, list) or len(value) != action.nargs:
            raise InputError(f"{where} must be a list of {action.nargs} values, got {value!r}")
        return [_scalar(v, action, where) for v in value]
    if action.dest == "policies" and isinstance(value, list):
        return ",".join(str(_scalar(v, action, where)) for v in value)
    return _scalar(value, action, where)


def _scalar(value: Any, action: argparse.Action, where: str) -> Any:
    kind = action.type
    if isinstance(value, bool) or value is None:
        raise InputError(f"{where} must be a {_kind_name(kind)}, got {value!r}")
    if kind is int and not isinstance(value, int):
        raise InputError(f"{where} must be an integer, got {value!r}")
    if kind is float:
        if not isinstance(value, int | float):
            raise InputError(f"{where} must be a number, got {value!r}")
        value = float(value)
    elif kind is not int:
        if not isinstance(value, str):
            hint = " (quote it: YAML reads 8:16:24 as a base-60 number)" if isinstance(value, int) else ""
            raise InputError(f"{where} must be a string, got {value!r}{hint}")
        value = Path(value) if kind is Path else value
    if action.choices is not None and value not in action.choices:
        raise InputError(f"{where} must be one of {', '.join(map(str, action.choices))}, got {value!r}")
    return value


def _kind_name(kind: Any) -> str:
    return {int: "integer", float: "number"}.get(kind, "string")
