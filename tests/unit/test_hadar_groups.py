"""Hadar's grouped LPs (policies/hadar/groups.py) and the direct HiGHS call (solve/highs.py)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from scipy import sparse
from scipy.optimize import linprog

from hadar.policies import create
from hadar.policies.hadar import groups
from hadar.policies.hadar.keeper import Work, horizon_s, jct_plan
from hadar.solve import highs
from tests.helpers import leased
from tests.unit.test_hadar import state_of

RATES = np.array([[4.0, 1.0], [4.0, 1.0], [4.0, 1.0], [2.0, 2.0]])


def test_no_groups_up_to_the_limit() -> None:
    assert groups.group(RATES, np.array([400.0, 40.0, 4000.0, 100.0]), np.ones(4, dtype=int), np.ones(4), 4) is None


def test_alike_jobs_share_a_group_shortest_first() -> None:
    # jobs 0-2 run at the same rates; job 3 does not; a limit of 2 leaves one group per class
    g = groups.group(RATES, np.array([400.0, 40.0, 4000.0, 100.0]), np.ones(4, dtype=int), np.ones(4), 2)
    assert g is not None and g.size == 2
    assert g.index[0] == g.index[1] == g.index[2] != g.index[3]
    assert g.members[int(g.index[0])].tolist() == [1, 0, 2]  # 10, 100 and 1000 s on the fast type
    assert sorted(g.count.tolist()) == [1.0, 3.0]
    # with room for 3 groups, the finest grid that fits (bands of 10x) parts the 2000-s job from
    # the 15-s and 30-s ones
    g3 = groups.group(RATES, np.array([120.0, 60.0, 8000.0, 100.0]), np.ones(4, dtype=int), np.ones(4), 3)
    assert g3 is not None and g3.size == 3 and g3.index[0] == g3.index[1] != g3.index[2]


def test_a_group_share_goes_shortest_first_and_no_more_than_needed() -> None:
    g = groups.group(RATES, np.array([400.0, 40.0, 4000.0, 100.0]), np.ones(4, dtype=int), np.ones(4), 2)
    assert g is not None
    share = np.zeros((g.size, 2))
    share[int(g.index[0]), 0] = 1.5  # one and a half gang-rounds of the fast type
    x, now = groups.spread(g, share, RATES, np.array([400.0, 40.0, 4000.0, 100.0]), 100.0)
    # job 1 needs 40 steps = 0.1 round at 4 steps/s; job 0 then gets a whole round (400 steps: done);
    # job 2 the remaining 0.4 round (160 of its 4000 steps)
    assert x[:, 0] == pytest.approx([1.0, 0.1, 0.4, 0.0])
    assert now == pytest.approx([1.0, 1.0, 0.04, 0.0])


def test_grouped_work_pools_the_members() -> None:
    rem = np.array([400.0, 40.0, 4000.0, 100.0])
    w = Work(RATES, rem, np.ones(4, dtype=int), np.array([2, 2]))
    g = groups.group(RATES, rem, w.scale, np.ones(4), 2)
    assert g is not None
    lw = groups.lp_work(w, g)
    assert sorted(lw.remaining.tolist()) == [100.0, 4440.0] and sorted(lw.gangs().tolist()) == [1.0, 3.0]
    # three fast-type jobs may run three gangs at once: the pooled horizon is set by capacity, not one gang
    assert horizon_s(lw) < horizon_s(Work(RATES[:1], np.array([4440.0]), np.ones(1, dtype=int), np.array([2, 2])))
    plan = jct_plan(lw, np.ones(2), 100.0, 3 * horizon_s(lw), lean=True)
    assert plan is not None and (plan[0] >= 0).all() and (plan[0].sum(axis=1) <= lw.gangs() + 1e-9).all()


def test_direct_highs_gives_linprogs_answer() -> None:
    rng = np.random.default_rng(5)
    a = sparse.random(30, 40, density=0.2, random_state=rng, format="csr")
    c, b = -rng.uniform(0, 1, 40), rng.uniform(1, 2, 30)
    got = highs.minimize(c, a, b, col_upper=np.ones(40))
    ref = linprog(c, A_ub=a, b_ub=b, bounds=(0, 1), method="highs")
    assert got is not None and np.array_equal(got.x, ref.x)
    assert np.array_equal(got.dual, ref.ineqlin.marginals)


def test_decision_with_grouped_lps_is_whole_gangs_within_capacity(table) -> None:
    from hadar.config import parse_cluster
    from hadar.sim.generate import JobGenerator

    cluster = parse_cluster("4:4:4", gpus_per_node=4)
    gen = iter(JobGenerator(table, 10.0, seed=7, multi_gpu=True))
    jobs = [next(gen) for _ in range(40)]
    st = state_of(cluster, jobs, jobs[-1].arrival_s, table)
    policy = create("hadar", lp_jobs=8)
    alloc = policy.allocate(st)
    assert alloc.counts == create("hadar", lp_jobs=8).allocate(st).counts
    got = leased(policy, st, alloc)
    used = [g for gs in got.values() for g in gs]
    assert len(used) == len(set(used)) == cluster.num_gpus  # no GPU idles: 40 jobs wait for 12 GPUs
    scale = {j.job_id: j.scale_factor for j in st.jobs}
    assert all(len(gpus) == scale[jid] for jid, gpus in got.items())


def test_a_warm_plan_starts_from_the_last_basis_and_finds_the_same_plan() -> None:
    rng = np.random.default_rng(11)
    rates, rem = rng.uniform(0.5, 5.0, (10, 3)), rng.uniform(2e3, 2e5, 10)
    w = Work(rates, rem, rng.choice([1, 2], 10), np.array([4, 4, 4]))
    warm, ids = highs.Warm(), np.arange(10)
    first = jct_plan(w, np.ones(10), 360.0, 3 * horizon_s(w), warm=warm, names=ids)
    assert first is not None and warm.basis is not None and warm.basis.names is not None
    later = Work(rates, rem * 0.99, w.scale, w.capacity)
    cold = jct_plan(later, np.ones(10), 360.0, 3 * horizon_s(w))
    hot = jct_plan(later, np.ones(10), 360.0, 3 * horizon_s(w), warm=warm, names=ids)
    assert cold is not None and hot is not None
    assert np.allclose(cold[0], hot[0], atol=1e-7) and np.allclose(cold[1], hot[1], atol=1e-7)
    # another job set: the basis is carried over by name (job 0 gone, job 10 new) and still ends at the optimum
    rates2, rem2 = np.vstack([rates[1:], [[1.0, 2.0, 3.0]]]), np.concatenate([rem[1:] * 0.98, [5e4]])
    other = Work(rates2, rem2, np.concatenate([w.scale[1:], [1]]), w.capacity)
    cold = jct_plan(other, np.ones(10), 360.0, 3 * horizon_s(other))
    hot = jct_plan(other, np.ones(10), 360.0, 3 * horizon_s(other), warm=warm, names=np.arange(1, 11))
    assert cold is not None and hot is not None
    assert np.allclose(cold[0], hot[0], atol=1e-7) and np.allclose(cold[1], hot[1], atol=1e-7)
    assert warm.basis is not None and np.array_equal(np.frombuffer(warm.basis.names[1], np.int64)[-10:],
                                                     np.arange(1, 11) * 4 + 3)  # its done rows, by job


def test_a_warm_horizon_is_the_cold_one() -> None:
    rng = np.random.default_rng(5)
    rates, rem = rng.uniform(0.5, 5.0, (12, 3)), rng.uniform(2e3, 2e5, 12)
    w = Work(rates, rem, rng.choice([1, 2, 4], 12), np.array([4, 8, 4]))
    warm = highs.Warm()
    assert horizon_s(w, warm, np.arange(12)) == pytest.approx(horizon_s(w), rel=1e-9)
    assert warm.basis is not None and warm.basis.names is not None
    fewer = Work(rates[2:], rem[2:] * 0.9, w.scale[2:], w.capacity)  # jobs 0 and 1 left: the basis is mapped
    assert horizon_s(fewer, warm, np.arange(2, 12)) == pytest.approx(horizon_s(fewer), rel=1e-9)


def test_a_mapped_basis_keeps_the_statuses_of_the_names_it_had() -> None:
    old = highs.Basis(None, bytes([1, 0, 2]), b"", (np.array([5, 7, 9], dtype=np.int64).tobytes(), b""))
    assert old.names is not None
    got = highs._carry(old.names[0], old.cols, np.array([9, 8, 5, 7], dtype=np.int64).tobytes(), 0)
    assert got.tolist() == [2, 0, 1, 0]
    assert pickle.loads(pickle.dumps(old)) == old  # a memo's basis pickles and compares as a plain value


def test_the_plan_basis_travels_in_the_memo(table, monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from hadar.config import parse_cluster
    from hadar.policies.hadar import closed
    from hadar.sim.generate import JobGenerator

    gen = iter(JobGenerator(table, 10.0, seed=3, multi_gpu=True))
    jobs = [next(gen) for _ in range(20)]
    st = state_of(parse_cluster("4:4:4"), jobs, jobs[-1].arrival_s, table)
    assert "hadar.plan_basis" not in create("hadar", warm_start=False).allocate(st).memo  # off: every round cold
    policy = create("hadar")  # on by default
    a1 = policy.allocate(st)
    assert isinstance(a1.memo.get("hadar.plan_basis"), highs.Basis)
    # the horizon here is the longest job's own time (closed.py: no LP, no basis); where the LP runs, its basis
    assert "hadar.horizon_basis" not in a1.memo
    monkeypatch.setattr(closed, "horizon", lambda *a: None)
    assert isinstance(policy.allocate(st).memo.get("hadar.horizon_basis"), highs.Basis)
    monkeypatch.undo()
    again = replace(st, memo=a1.memo)
    assert policy.allocate(again).counts == policy.allocate(again).counts  # same state and memo: same round


def test_direct_highs_with_equalities_gives_linprogs_answer_and_so_does_the_fallback(monkeypatch) -> None:
    rng = np.random.default_rng(9)
    a = sparse.random(12, 20, density=0.3, random_state=rng, format="csr")
    c, b = rng.uniform(0, 1, 20), rng.uniform(1, 2, 12)
    lower = np.concatenate([np.full(8, -np.inf), b[8:]])  # the last 4 rows are equalities
    direct = highs.minimize(c, a, b, lower=lower, col_upper=np.full(20, 3.0))
    ref = linprog(c, A_ub=a[:8], b_ub=b[:8], A_eq=a[8:], b_eq=b[8:], bounds=(0, 3), method="highs")
    assert direct is not None and ref.status == 0
    assert np.array_equal(direct.x, ref.x) and direct.fun == ref.fun
    assert np.array_equal(direct.dual, np.concatenate([ref.ineqlin.marginals, ref.eqlin.marginals]))
    monkeypatch.setattr(highs, "_h", None)  # another SciPy: linprog with the same options
    fallback = highs.minimize(c, a, b, lower=lower, col_upper=np.full(20, 3.0))
    assert fallback is not None and np.array_equal(fallback.x, ref.x)
    assert np.array_equal(fallback.dual, direct.dual)
