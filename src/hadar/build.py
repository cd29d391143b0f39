"""One builder that wires a run, for the simulator, the batch runtime and the service alike.

From a policy's declared traits it picks the planner (Gavel's rounds,
placement, forking), from the run's options the re-solve cadence, and it
hands the same ledger, planner and cadence to the ``Engine`` whatever the
executor and clock are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hadar.clock import Clock
from hadar.engine import NO_HOOKS, Engine, Executor, Hooks, RoundPlanner
from hadar.errors import InputError
from hadar.mechanism.cadence import Cadence, GavelCadence, OnChange
from hadar.mechanism.forking import ForkingPlanner
from hadar.mechanism.ledger import JobLedger
from hadar.mechanism.placement import PlacementPlanner
from hadar.mechanism.quotas import QuotaPlanner
from hadar.mechanism.rounds import GavelRoundPlanner
from hadar.mechanism.tenants import Tenants
from hadar.model.cluster import Cluster
from hadar.model.fork_efficiency import IDEAL
from hadar.model.fork_model import ForkSetting
from hadar.model.throughput import ThroughputTable
from hadar.policies.base import Policy, PolicyTraits
from hadar.policies.hadare import HadarEPolicy
from hadar.policies.profiles import PolicySpec, resolve
from hadar.policies.registry import entry
from hadar.policies.teams import TeamWeighted

#: Gavel's simulator re-solves at most this often (seconds).
GAVEL_RESOLVE_GAP_S = 1920.0


@dataclass(frozen=True, slots=True)
class RunPolicy:
    """The policy of one run and the label its results carry (a profile name or the policy's name)."""

    label: str
    policy: Policy


def policy_for_run(name: str | Policy, *, seed: int = 0, gavel_compat: bool = False,
                   profiles: Mapping[str, PolicySpec] | None = None,
                   params: Mapping[str, Any] | None = None) -> RunPolicy:
    """Build the policy a run names: a registered name or a profile (``profiles``), or an instance.
    ``params`` set parameters on top of the profile's.

    The run's ``seed`` and ``gavel_compat`` go to policies that take them (unless the profile sets
    them; ``gandiva`` then replays Gavel's random grouping); a
    Gavel-compatible run gives policies with a reference solver ``solver="ecos"`` (Gavel's solver:
    reproduce ECOS's point, not just an optimum) and the parameters the policy lists in
    ``GAVEL_COMPAT`` (``Entry.compat_params``) unless the profile says otherwise.
    """
    if not isinstance(name, str):
        return RunPolicy(name.name, name)
    spec = resolve(name, profiles)
    if params:
        spec = PolicySpec(spec.label, spec.policy, {**spec.params, **params})
    defaults: dict[str, Any] = {"seed": seed, "gavel_compat": gavel_compat}
    if gavel_compat and entry(spec.policy).traits.reference_solver:
        defaults["solver"] = "ecos"
    if gavel_compat:
        defaults.update(entry(spec.policy).compat_params)
    return RunPolicy(spec.label, spec.build(**defaults))


def team_params(name: str | Policy, profiles: Mapping[str, PolicySpec] | None,
                tenants: Tenants | None) -> dict[str, Any]:
    """Parameters a run with ``tenants`` sets on the policy it names: the teams' weights as
    ``entity_weights`` where the policy takes them (Gavel's hierarchical policies) and its profile does
    not set them; nothing for an instance or a run without tenants."""
    if tenants is None or not isinstance(name, str):
        return {}
    spec = resolve(name, profiles)
    if "entity_weights" in spec.params or "entity_weights" not in entry(spec.policy).parameters():
        return {}
    return {"entity_weights": tenants.weights}


def _takes_team_weights(policy: Policy) -> bool:
    """Whether the policy shares between teams itself (``entity_weights``: Gavel's hierarchical policies)."""
    try:
        return "entity_weights" in entry(policy.name).parameters()
    except InputError:  # an instance of no registered policy
        return False


def make_planner(traits: PolicyTraits, seed: int = 0, *, gavel_compat: bool = True,
                 fork_efficiency: ForkSetting = IDEAL) -> RoundPlanner:
    """The planner a policy's traits name (planners read the cluster from each snapshot). Outside
    ``gavel_compat`` Gavel's rounds hand spare GPUs out only after every positive priority is served.
    ``fork_efficiency``: what the run credits forked copies (the forking planner runs copies as one
    gang where that gains)."""
    if traits.planner == "placement":
        return PlacementPlanner()
    if traits.planner == "forking":
        return ForkingPlanner(fork_efficiency, traits.yield_after_s)
    return GavelRoundPlanner(shuffle_types=not traits.type_aware, skip_zero_priority=traits.skip_zero_priority,
                             seed=seed, spare_last=not gavel_compat)


def run_cluster(cluster: Cluster, table: ThroughputTable, gavel_compat: bool) -> Cluster:
    """The cluster a run decides on: Gavel's type order (v100, p100, k80, then as listed) under
    ``gavel_compat``, else fastest first by the table (``ThroughputTable.speed_order``), so that no
    decision depends on what the types are called."""
    return cluster if gavel_compat else cluster.in_order(table.speed_order(cluster.listed_types))


def make_cadence(gavel_compat: bool) -> Cadence:
    return GavelCadence(GAVEL_RESOLVE_GAP_S) if gavel_compat else OnChange()


@dataclass(frozen=True, slots=True)
class WireOptions:
    """How ``wire`` builds a run: its round length, seed and cadence (``gavel_compat``), whether the
    ledger keeps the per-copy log (``track_copies``; always for forking), who listens (``hooks``: events,
    progress, a recorder such as the service's store), the forking planner's own estimate of a copy's
    worth (``fork_efficiency``), and the teams (``tenants``) whose quotas every plan is held to
    (``mechanism/quotas.QuotaPlanner`` in front of the policy's planner; a borrowed GPU is reclaimed only
    from a job that ran ``min_run_s``) and whose weights a policy that does not take them
    (``entity_weights``) sees in its jobs' priority weights (``policies/teams.TeamWeighted``)."""

    round_s: float
    seed: int = 0
    gavel_compat: bool = False
    track_copies: bool = False
    hooks: Hooks = NO_HOOKS
    fork_efficiency: ForkSetting = IDEAL
    tenants: Tenants | None = None
    min_run_s: float = 0.0


def wire(policy: Policy, cluster: Cluster, table: ThroughputTable, executor: Executor, clock: Clock,
         **options: Any) -> tuple[Engine, JobLedger]:
    """The engine and ledger of one run (``options``: the fields of ``WireOptions``)."""
    o = WireOptions(**options)
    if not o.fork_efficiency.ideal and isinstance(policy, HadarEPolicy):  # (before a team wrapper hides it)
        policy.fork_estimate = o.fork_efficiency  # the planner's estimate, never the world's
    if o.tenants is not None and o.tenants.teams and not _takes_team_weights(policy):
        policy = TeamWeighted(policy, o.tenants.weights)  # teams weigh through the jobs' priority weights
    traits = policy.traits
    ledger = JobLedger(run_cluster(cluster, table, o.gavel_compat), table, o.round_s,
                       track_copies=o.track_copies or traits.forks)
    planner = make_planner(traits, o.seed, gavel_compat=o.gavel_compat, fork_efficiency=o.fork_efficiency)
    if o.tenants is not None:
        planner = QuotaPlanner(planner, o.tenants, o.min_run_s)
    engine = Engine(policy, planner, executor, clock, ledger, cadence=make_cadence(o.gavel_compat), hooks=o.hooks)
    return engine, ledger
