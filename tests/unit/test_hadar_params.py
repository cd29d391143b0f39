"""Hadar's parameters in tiers: the core ones are ``HadarPolicy``'s keywords, the advanced ones (the former
hidden constants among them) a ``HadarAdvanced``, both settable by name, with the values Hadar was tuned
with, and each reaches the decision it tunes."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

from hadar.errors import InputError
from hadar.model.cluster import Cluster
from hadar.policies import create
from hadar.policies.hadar import groups, keeper, plan_lp
from hadar.policies.hadar.keeper import PlanShape, Work, horizon_s, jct_plan, periods_s, round_plan
from hadar.policies.hadar.pace import Shield
from hadar.policies.hadar.params import ADVANCED_NAMES, HadarAdvanced
from hadar.policies.hadar.policy import HadarPolicy
from hadar.policies.hadare import HadarEAdvanced, HadarEPolicy
from hadar.policies.profiles import load_profiles
from hadar.policies.registry import entry
from tests.helpers import leased
from tests.unit.test_hadar import ONE_FAST, ONE_FAST_ONE_SLOW, job, state_of

CORE = {"utility", "rate_model", "restart_s", "plan", "keep_slack", "share"}
#: the constants that were hidden in the modules, as parameters, with the values they had
FORMER_CONSTANTS = {"keep_own_within": 1.01, "keep_own_quiet": 0.02, "keep_mip_nodes": 1000, "plan_split": 3,
                    "plan_growth": 3.0, "plan_lean_growth": 5.0, "plan_tie": 1e-3,
                    "lp_bands": (1.05, 1.1, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0)}


def test_former_constants_are_advanced_parameters_with_their_old_values() -> None:
    e = entry("hadar")
    params = e.parameters()
    assert {k: params[k] for k in FORMER_CONSTANTS} == FORMER_CONSTANTS
    assert set(params) - e.advanced() == CORE
    assert e.advanced() == set(ADVANCED_NAMES) and len(ADVANCED_NAMES) == 27
    assert HadarEAdvanced().match_floor == 0.01 and "match_floor" in entry("hadare").advanced()
    assert set(entry("hadare").parameters()) - entry("hadare").advanced() == CORE | {"fork"}


def test_no_hadar_constructor_takes_more_than_eight_parameters() -> None:
    for cls in (HadarPolicy, HadarEPolicy):
        assert len(inspect.signature(cls.__init__).parameters) <= 8, cls.__name__


def test_advanced_parameters_are_set_by_name_in_profiles(tmp_path: Path) -> None:
    p = create("hadar", plan_split=2, lp_bands=[1.5, 4.0], keep_own_quiet=0.05, keep_short=None)
    assert isinstance(p, HadarPolicy)
    assert (p.advanced.plan_split, p.advanced.lp_bands, p.advanced.keep_own_quiet) == (2, (1.5, 4.0), 0.05)
    assert p.advanced.keep_short is None and p.plan_shape == PlanShape(2, 3.0, 5.0, 1e-3)
    e = create("hadare", plan_split=2, match_floor=0.1, first_round=False)
    assert isinstance(e, HadarEPolicy)
    assert e.hadar.advanced.plan_split == 2 and e.advanced.match_floor == 0.1 and not e.hadar.advanced.first_round
    f = tmp_path / "p.yaml"
    f.write_text("coarse: {policy: hadar, lp_bands: [2.0, 10.0], plan_growth: 4}\n")
    built = load_profiles(f)["coarse"].build()
    assert isinstance(built, HadarPolicy) and built.advanced.lp_bands == (2.0, 10.0)
    assert built.advanced.plan_growth == 4


@pytest.mark.parametrize(("policy", "params", "message"), [
    ("hadar", {"plan_growth": 1.0}, "plan_growth must be > 1"),
    ("hadar", {"plan_lean_growth": 0.5}, "plan_lean_growth must be > 1"),
    ("hadar", {"lp_bands": [2.0, 1.5]}, "lp_bands must be a list of increasing ratios > 1"),
    ("hadar", {"lp_bands": []}, "lp_bands must be a list of increasing ratios > 1"),
    ("hadar", {"lp_bands": None}, "lp_bands must be a list of increasing ratios > 1"),
    ("hadar", {"keep_mip_nodes": 0}, "keep_mip_nodes must be a whole number >= 1"),
    ("hadar", {"plan_split": 1.5}, "plan_split must be a whole number >= 1"),
    ("hadar", {"keep_own_within": 0.5}, "keep_own_within must be >= 1"),
    ("hadar", {"keep_own_quiet": -0.1}, "keep_own_quiet must be >= 0"),
    ("hadar", {"plan_tie": -1.0}, "plan_tie must be >= 0"),
    ("hadar", {"keep_busy": 1.0}, "keep_busy must be in [0, 1)"),
    ("hadar", {"plan_splitt": 2}, "has no parameter 'plan_splitt'"),
    ("hadare", {"match_floor": 0.0}, "match_floor must be in (0, 1]"),
    ("hadare", {"plan_growth": 1.0}, "plan_growth must be > 1"),
])
def test_advanced_parameters_are_checked(policy: str, params: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        create(policy, **params)


def test_the_defaults_given_by_name_decide_as_the_defaults() -> None:
    jobs = [job(0, "long", 40000), job(1, "short", 400), job(2, "picky", 9000, arrival=10.0),
            job(3, "dist", 8000, sf=4)]
    st = state_of(Cluster.from_counts({"fast": 4, "slow": 4}), jobs, now=20.0)
    explicit = {f: getattr(HadarAdvanced(), f) for f in ADVANCED_NAMES}
    assert leased(create("hadar"), st) == leased(create("hadar", **explicit), st)


def test_plan_split_growth_and_tie_reach_the_jct_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's periods and tie rule come from the policy's parameters; the LP is forced here (the
    closed form answers this case otherwise) to see the tie rule's weight reach it."""
    seen: dict[str, object] = {}
    monkeypatch.setattr(keeper.closed, "plan", lambda dur, pairs, periods, *a: seen.update(lens=periods.lens,
                                                                                        split=periods.split))
    solve = plan_lp.solve

    def spy(work, weight, pairs, dur, periods, warm, names):
        seen["periods"] = periods
        return solve(work, weight, pairs, dur, periods, warm, names)

    monkeypatch.setattr(plan_lp, "solve", spy)
    st = state_of(ONE_FAST_ONE_SLOW, [job(0, "long", 40000), job(1, "short", 4000)])
    leased(create("hadar", plan_split=2, plan_growth=2.0, plan_tie=0.5, keep_slack=None), st)
    lens = np.asarray(seen["lens"]) * 3600.0
    assert seen["split"] == 2 and lens[:4].tolist() == pytest.approx([180.0, 180.0, 360.0, 720.0])
    periods = seen["periods"]
    assert isinstance(periods, plan_lp.Periods) and periods.tie == 0.5 and periods.split == 2
    assert periods_s(360.0, 10_000.0, 2.0, 2)[:4].tolist() == pytest.approx([180.0, 180.0, 360.0, 720.0])


def test_the_tie_rule_charges_slower_types_by_its_weight() -> None:
    # one job, a fast type (1 h to finish) and one 3x slower (3 h): per unit, the period's midpoint, and
    # on the slower type tie x (3 - 1) x the first period's length on top
    lens, dur, ii = np.array([0.1, 0.1, 0.2]), np.array([1.0, 3.0]), np.array([0, 0])
    mid = np.array([0.05, 0.15, 0.3])
    for tie in (0.0, 1e-3, 0.5):
        costs = plan_lp._costs(np.ones(1), ii, dur, lens, tie)[:-1].reshape(2, 3)
        assert costs[0].tolist() == pytest.approx(mid.tolist())
        assert costs[1].tolist() == pytest.approx((mid + tie * 0.1 * 2.0).tolist())


def test_lp_bands_decide_how_jobs_are_grouped(monkeypatch: pytest.MonkeyPatch) -> None:
    rates = np.array([[1.0, 0.5]] * 6)
    remaining = np.array([100.0, 104.0, 130.0, 180.0, 400.0, 900.0])
    fine = groups.group(rates, remaining, np.ones(6, dtype=int), np.ones(6), 4)
    coarse = groups.group(rates, remaining, np.ones(6, dtype=int), np.ones(6), 4, (10.0,))
    assert fine is not None and coarse is not None
    # the finest default bands that leave at most 4 groups; one 10x band holds all of 100-900 s
    assert [m.tolist() for m in fine.members] == [[0, 1], [2, 3], [4], [5]] and coarse.size == 1
    seen = []
    real = groups.group
    monkeypatch.setattr(groups, "group", lambda *a: seen.append(a[5]) or real(*a))
    st = state_of(ONE_FAST_ONE_SLOW, [job(i, "long", 4000 + 100 * i) for i in range(3)])
    leased(create("hadar", lp_jobs=2, lp_bands=[1.3, 3.0]), st)
    assert seen and seen[0] == (1.3, 3.0)


def test_keep_own_within_and_quiet_decide_the_own_rule() -> None:
    # one fast GPU: job 0 has 1000 s left, job 1 500 s; a horizon of 1005 s is job 0's own length
    # within 1.01x (not within 1.001x); no arrival for 100 s: quiet at 2 % of it (not at 20 %)
    st = state_of(ONE_FAST, [job(0, "long", 4000), job(1, "short", 2000)], now=100.0)
    w = Work(np.array([[4.0], [4.0]]), np.array([4000.0, 2000.0]), np.ones(2, dtype=int), np.array([1]))
    shield = Shield(None, 0.6, None, None)
    got = shield.jobs(st, w, None, 1005.0)
    assert got is not None and got.tolist() == [0, 1]  # 500 s <= 0.6 x 1005 s: never held back
    assert Shield(None, 0.6, None, None, own_within=1.001).jobs(st, w, None, 1005.0) is None
    assert Shield(None, 0.6, None, None, own_quiet=0.2).jobs(st, w, None, 1005.0) is None
    policy = create("hadar", keep_own_within=1.001, keep_own_quiet=0.2)
    assert isinstance(policy, HadarPolicy)
    assert (policy.shield().own_within, policy.shield().own_quiet) == (1.001, 0.2)


def test_keep_mip_nodes_is_the_whole_gang_mips_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    budgets = []
    real = keeper.milp

    def spy(*a, **kw):
        budgets.append(kw["options"]["node_limit"])
        return real(*a, **kw)

    monkeypatch.setattr(keeper, "milp", spy)
    rng = np.random.default_rng(3)
    w = Work(rng.uniform(0.5, 5.0, (6, 2)), rng.uniform(2e3, 2e4, 6), np.ones(6, dtype=int), np.array([3, 3]))
    value = rng.uniform(0.0, 1.0, (6, 2))
    h = horizon_s(w)
    round_plan(w, value, 360.0, h - 360.0, whole=True)
    round_plan(w, value, 360.0, h - 360.0, whole=True, mip_nodes=7)
    assert budgets == [1000, 7]


def _weights_seen(policy: HadarEPolicy, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """What ``policy`` passes its placement as type weights, with a forking LP where no type fits any job."""
    seen: list[object] = []
    own = policy._own_gpus
    monkeypatch.setattr(policy, "_lp", lambda state: (1e4, np.zeros((2, 2)), np.zeros(2, dtype=bool)))
    monkeypatch.setattr(policy, "_own_gpus", lambda state, lp, weight, warm=None: seen.append(weight) or own(
        state, lp, weight, warm))
    return seen


def test_match_floor_bounds_hadare_s_type_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    st = state_of(ONE_FAST_ONE_SLOW, [job(0, "long", 40000), job(1, "short", 4000)])
    for floor, match in ((0.01, 2.0), (0.5, 2.0), (0.5, 1.0)):
        policy = create("hadare", match_floor=floor, match=match)
        assert isinstance(policy, HadarEPolicy)
        seen = _weights_seen(policy, monkeypatch)
        policy.allocate(st)
        assert np.asarray(seen[0]).tolist() == [[floor ** match] * 2] * 2


def test_jct_plan_shape_defaults_are_the_plans_of_before() -> None:
    w = Work(np.array([[4.0], [4.0]]), np.array([400.0, 40000.0]), np.ones(2, dtype=int), np.array([1]))
    total = 3 * horizon_s(w)
    default = jct_plan(w, np.ones(2), 360.0, total)
    explicit = jct_plan(w, np.ones(2), 360.0, total, shape=PlanShape(3, 3.0, 5.0, 1e-3))
    assert default is not None and explicit is not None
    assert default[0].tobytes() == explicit[0].tobytes() and default[1].tobytes() == explicit[1].tobytes()


def test_ftf_guard_puts_first_the_jobs_that_would_break_it() -> None:
    from hadar.policies.hadar.pace import at_risk

    # one fast GPU, two jobs waiting since 0 at t = 3000 s: 4 steps/s; isolated: half the GPU each, so
    # job 0 (4000 steps) 2000 s alone, job 1 (2000 steps) 1000 s. A round (360 s) on the slowest type
    # (the only one) then the best: job 0 done at 3000 + 360 + 640 = 4000 s, job 1 at 3500 s
    st = state_of(ONE_FAST, [job(0, "long", 4000), job(1, "short", 2000)], now=3000.0)
    w = Work(np.array([[4.0], [4.0]]), np.array([4000.0, 2000.0]), np.ones(2, dtype=int), np.array([1]))
    assert at_risk(st, w, None) is None
    got = at_risk(st, w, 2.5)  # 4000 <= 2.5 x 2000, 3500 > 2.5 x 1000
    assert got is not None and got.tolist() == [False, True]
    got = at_risk(st, w, 1.5)
    assert got is not None and got.tolist() == [True, True]
    assert at_risk(st, w, 4.0) is None
    with pytest.raises(InputError, match="ftf_guard must be >= 1"):
        create("hadar", ftf_guard=0.5)
