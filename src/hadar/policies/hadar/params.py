"""Hadar's parameters in two tiers: the core ones (``HadarPolicy``'s own keywords, described in
``PARAMS``) and the advanced ones (:class:`HadarAdvanced`, described in ``ADVANCED``): the tuning of
the keeper, the plan and the LPs, each with the value Hadar was tuned with. A profile sets either kind
by name; docs/policies.md renders both tables, with their defaults."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from hadar.errors import InputError
from hadar.policies.hadar.groups import RATIOS
from hadar.policies.hadar.keeper import MIP_NODES, PlanShape
from hadar.policies.hadar.pace import OWN_QUIET, OWN_WITHIN

_PLAN = PlanShape()

PARAMS: Mapping[str, str] = {
    "utility": "what progress is worth: `jct` (shortest remaining first; the plan needs it), `fifo`, `fair` "
               "or `throughput`",
    "rate_model": "pace of a gang spanning GPU types: `sync` (its slowest type's) or `additive` (every GPU "
                  "adds its share; valid only with local batch sizes in proportion to each GPU's speed)",
    "restart_s": "checkpoint-restore cost (s) charged to any placement other than the job's previous one "
                 "(null: each job's own `restart_s`, the cost the simulator charges: 0 unless the job file "
                 "or `--restart-s` gives one)",
    "plan": "`lp`: the round comes from a fluid plan that minimizes the mean time at which the remaining work "
            "gets done (keeper.jct_plan), in whole gangs; `pack`: spec section 3's packing alone",
    "keep_slack": "TTD keeper: a round may push the horizon of all remaining work out by at most this share "
                  "of a round, else it is re-planned (null: keeper off)",
    "share": "space sharing: a job left waiting may share the GPUs of a placed job of the same GPU count that "
             "it packs well with (the table's co-located rates), priced at the host's utility loss "
             "(docs/packing.md)",
}

ADVANCED: Mapping[str, str] = {
    "steepness": "exponent on the price curve L (U/L)^(steepness x share taken): how fast a type's price "
                 "rises as it fills",
    "exponent": "exponent of the `jct` utility's shortest-remaining term",
    "aging_s": "a job's weight grows by 1 for every this many seconds it waited without GPUs (null: off)",
    "fill": "after the priced pass, give GPUs still free to waiting jobs",
    "first_round": "a job that never ran goes ahead of every job that has (it starts at the first round "
                   "boundary after it arrives)",
    "keep_busy": "the keeper's slack while jobs are still arriving (one arrived within `keep_quiet` x the "
                 "horizon; null: always `keep_slack`)",
    "keep_quiet": "how recent an arrival, as a share of the horizon, means jobs are still arriving",
    "keep_whole": "with at most this many active jobs, all of which fit at once, the keeper re-plans in whole "
                  "gangs (a small MIP) rather than rounding the LP plan",
    "keep_mip_nodes": "the whole-gang MIP's branch-and-bound budget, in nodes (a work limit, so the answer "
                      "does not depend on the machine's speed)",
    "keep_fair": "the keeper never holds back a job that never ran, nor one whose finish-time fairness so far "
                 "(time since arrival plus remaining best-type time, over its best-type time alone) exceeds "
                 "this: they are placed before the jobs the horizon needs (null: the keeper holds back any job)",
    "keep_short": "the keeper never holds back a job whose remaining time on its best type is at most this many "
                  "rounds: a short job costs the horizon little, and holding it back costs its JCT hours "
                  "(null: off)",
    "keep_own": "when one job's own length sets the horizon (see `keep_own_within`) and no job arrived within "
                "`keep_own_quiet` x the horizon, the keeper never holds back a job whose remaining best-type "
                "time is at most this share of the horizon: the drain waits for that job anyway (null: off)",
    "keep_own_within": "for `keep_own`: one job's own length sets the horizon when the horizon is at most this "
                       "many times the longest remaining best-type time",
    "keep_own_quiet": "for `keep_own`: arrivals have paused when none came within this share of the horizon "
                      "(while jobs keep coming, the job that sets the horizon needs its best GPUs)",
    "keep_max_jobs": "above this many active jobs the keeper is skipped (null: never)",
    "ftf_cap": "where the TTD keeper re-plans a round, a job that its best type would finish within this round, "
               "and that the re-plan would finish later than this many times its best-type time after its "
               "arrival while the JCT plan's round would not, keeps the plan's GPUs (null: off)",
    "ftf_guard": "the tail guard of Hadar's objective: a job that, waiting this round and then running on its "
                 "best type, would finish later than this many times its isolated time (the whole job on a 1/m "
                 "share of every type, m the active jobs) goes ahead of the plan's and the keeper's other jobs, "
                 "as a job that never ran does (null: off; docs/hadar.md, \"The objective\")",
    "plan_total": "the fluid plan's span, as a multiple of the TTD horizon",
    "plan_max_jobs": "above this many active jobs the plan is skipped (null: never)",
    "plan_split": "the fluid plan cuts this round into so many equal periods (so that finishing early in the "
                  "round counts), then one more round, then periods `plan_growth` times longer each",
    "plan_growth": "after this round and the next, each of the fluid plan's periods is this many times the one "
                   "before (> 1)",
    "plan_lean_growth": "the same for a lean plan (jobs grouped: `lp_jobs`), which takes this round as one "
                        "period (> 1)",
    "plan_tie": "the fluid plan's tie rule: a unit of work done on a type t times slower than the job's fastest "
                "costs as much more as finishing it `plan_tie` x (t - 1) of the first period later (docs/hadar.md)",
    "warm_start": "start the JCT plan's LP and the horizon LPs from last round's simplex bases, carried over "
                  "job by job across arrivals and completions (a quarter of the CPU time of cold starts at steady "
                  "state; the LPs' answers are rounded and the plan breaks ties by a rule, so warm and cold starts "
                  "decide alike: docs/hadar.md, \"Warm starts\")",
    "lp_jobs": "above this many active jobs the plan's and the keeper's LPs see groups of alike jobs (same "
               "rates, gang size and weight, similar work left), at most this many (groups.py)",
    "lp_bands": "how alike the work left of a group's jobs is: the ratios of the bands of remaining best-type "
                "time tried, finest first, until the groups number at most `lp_jobs` (then one group per kind "
                "of job)",
    "share_gain": "with `share`: a pair shares only when its two co-located rates, each over the job's rate "
                  "alone, sum to more than this",
}


@dataclass(frozen=True, slots=True)
class HadarAdvanced:
    """Hadar's advanced parameters (``ADVANCED`` says what each does), with the defaults Hadar was
    tuned with; checked when built (``InputError``)."""

    steepness: float = 0.25
    exponent: float = 1.0
    aging_s: float | None = None
    fill: bool = True
    first_round: bool = True
    keep_busy: float | None = 0.1
    keep_quiet: float = 0.1
    keep_whole: int = 12
    keep_mip_nodes: int = MIP_NODES
    keep_fair: float | None = None
    keep_short: float | None = 1.0
    keep_own: float | None = 0.6
    keep_own_within: float = OWN_WITHIN
    keep_own_quiet: float = OWN_QUIET
    keep_max_jobs: int | None = None
    ftf_cap: float | None = 2.0
    ftf_guard: float | None = None
    plan_total: float = 3.0
    plan_max_jobs: int | None = None
    plan_split: int = _PLAN.split
    plan_growth: float = _PLAN.growth
    plan_lean_growth: float = _PLAN.lean_growth
    plan_tie: float = _PLAN.tie
    warm_start: bool = True
    lp_jobs: int = 128
    lp_bands: tuple[float, ...] = RATIOS
    share_gain: float = 1.0

    def __post_init__(self) -> None:
        _check(self.plan_total >= 1, f"plan_total must be >= 1 (a multiple of the horizon), got {self.plan_total}")
        _check(self.keep_busy is None or 0 <= self.keep_busy < 1, f"keep_busy must be in [0, 1), got {self.keep_busy}")
        _check(self.keep_quiet >= 0, f"keep_quiet must be >= 0, got {self.keep_quiet}")
        _check(self.keep_fair is None or self.keep_fair >= 1, f"keep_fair must be >= 1, got {self.keep_fair}")
        for key in ("keep_short", "keep_own"):
            v = getattr(self, key)
            _check(v is None or v >= 0, f"{key} must be >= 0, got {v}")
        _check(min(self.keep_whole, self.lp_jobs, _limit(self.keep_max_jobs), _limit(self.plan_max_jobs)) >= 0,
               "job-count limits must be >= 0")
        _check(isinstance(self.warm_start, bool), f"warm_start must be true or false, got {self.warm_start!r}")
        _check(self.share_gain >= 0, f"share_gain must be >= 0, got {self.share_gain}")
        for key in ("ftf_cap", "ftf_guard"):
            v = getattr(self, key)
            _check(v is None or v >= 1, f"{key} must be >= 1, got {v}")
        _check(self.keep_own_within >= 1, f"keep_own_within must be >= 1, got {self.keep_own_within}")
        _check(self.keep_own_quiet >= 0, f"keep_own_quiet must be >= 0, got {self.keep_own_quiet}")
        for key in ("keep_mip_nodes", "plan_split"):
            v = getattr(self, key)
            _check(isinstance(v, int) and not isinstance(v, bool) and v >= 1, f"{key} must be a whole number >= 1, "
                   f"got {v!r}")
        for key in ("plan_growth", "plan_lean_growth"):
            v = getattr(self, key)
            _check(v > 1 and math.isfinite(v), f"{key} must be > 1, got {v}")
        _check(self.plan_tie >= 0 and math.isfinite(self.plan_tie), f"plan_tie must be >= 0, got {self.plan_tie}")
        object.__setattr__(self, "lp_bands", _bands(self.lp_bands))

    @property
    def plan_shape(self) -> PlanShape:
        """The fluid plan's periods and tie rule (keeper.jct_plan)."""
        return PlanShape(self.plan_split, self.plan_growth, self.plan_lean_growth, self.plan_tie)


#: the advanced parameters' names (keywords ``HadarPolicy`` takes besides its own)
ADVANCED_NAMES = tuple(f.name for f in fields(HadarAdvanced))


def advanced_of(owner: str, knobs: Mapping[str, Any]) -> HadarAdvanced:
    """The advanced parameters ``knobs`` sets (the rest at their defaults); a name that is none of them
    raises ``TypeError`` naming ``owner``."""
    unknown = [k for k in knobs if k not in ADVANCED_NAMES]
    if unknown:
        raise TypeError(f"{owner} takes no parameter {unknown[0]!r}")
    return HadarAdvanced(**knobs)


def _bands(v: Any) -> tuple[float, ...]:
    ok = isinstance(v, list | tuple) and len(v) > 0 and all(
        isinstance(r, int | float) and not isinstance(r, bool) and math.isfinite(r) and r > 1 for r in v)
    _check(ok and all(a < b for a, b in itertools.pairwise(v)),
           f"lp_bands must be a list of increasing ratios > 1, got {v!r}")
    return tuple(float(r) for r in v)


def _limit(v: int | None) -> int | float:
    return float("inf") if v is None else v


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise InputError(message)
