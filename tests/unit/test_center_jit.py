"""The compiled centering (gavel.center_jit, gavel.center_compiled) returns NumPy's point to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from hadar.errors import SolverError
from hadar.policies.gavel import center, center_compiled, center_jit, problem
from hadar.policies.gavel.center import Face, blend_start, center_numpy, interior_point, repair
from hadar.policies.gavel.common import Inputs
from hadar.policies.gavel.max_min import solve_max_min


@pytest.mark.parametrize("n", [*range(1, 140), 255, 256, 257, 511, 700, 1024, 1500, 4096])
def test_pairwise_sums_match_numpy(n):
    rng = np.random.default_rng(n)
    v = rng.standard_normal(n) * np.exp(4.0 * rng.standard_normal(n))
    assert center_jit._all_sum(v) == v.sum()
    assert center_jit._row_sum(v.reshape(1, n), 0) == v.reshape(1, n).sum(axis=1)[0]


def _random_face(rng: np.random.Generator, m: int, n: int, *, glob: bool) -> tuple[Face, np.ndarray]:
    active = rng.random((m, n)) < 0.8
    active[:, 0] = True
    caps = rng.integers(1, 20, n).astype(float)
    if n > 1 and rng.random() < 0.3:
        caps[-1] = 0.0  # a type with every node down: no variables there
        active[:, -1] = False
    a = np.where(active, rng.uniform(0.1, 3.0, (m, n)), 0.0)
    k, s = rng.integers(1, 4, m).astype(float), rng.choice([1.0, 2.0, 4.0], m)
    probe = Face(a, np.full(m, -np.inf), k, s, caps, active)
    x_in = interior_point(probe)
    u = (a * x_in).sum(axis=1)
    g = np.where(rng.random(m) < 0.7, u * rng.uniform(0.5, 1.5, m), -np.inf)  # some floors above the start
    c = c_floor = None
    if glob:
        c = rng.uniform(0.0, 1.0, (m, n))
        c_floor = 0.5 * float((k[:, None] * c * x_in).sum())
    face = Face(a, np.minimum(g, np.where(np.isfinite(g), 0.999 * u, g)) if rng.random() < 0.5 else g, k, s,
                caps, active, c=c, c_floor=c_floor or 0.0)
    x_opt = np.where(active, rng.uniform(0.0, 1.0, (m, n)), 0.0)
    return face, x_opt


@pytest.mark.parametrize("seed", range(40))
def test_kernels_match_numpy_on_random_faces(seed):
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(1, 40)), int(rng.integers(1, 8))
    face, x_opt = _random_face(rng, m, n, glob=seed % 3 == 0)
    try:
        x0 = blend_start(face, x_opt)
    except Exception:  # an empty face at these floors: nothing to center
        face = Face(face.a, np.full(m, -np.inf), face.k, face.s, face.capacities, face.active, c=face.c)
        x0 = blend_start(face, x_opt)
    assert center_jit.fits(face)
    expected = center_numpy(face, x0)
    got = center_compiled.analytic_center(face, x0)
    assert got.tobytes() == expected.tobytes()
    # the start point and its parts: the same bits as blend_start's NumPy code
    arr = center_compiled._Arrays(face)
    assert center_compiled.repair(x_opt, arr.act, arr.rows[3], arr.caps).tobytes() == repair(face, x_opt).tobytes()
    assert center_compiled.interior(arr.act, arr.rows[3], arr.caps).tobytes() == interior_point(face).tobytes()
    assert center_compiled.center_face(face, x_opt).tobytes() == center_numpy(face, blend_start(face, x_opt)).tobytes()
    # the floors capped at the repaired solver point first (ClassProblem.centered's way)
    x_rep = repair(face, x_opt)
    lowered = problem.capped(face, x_rep)
    assert center_compiled.center_capped(face, x_opt).tobytes() == \
        center_numpy(lowered, blend_start(lowered, x_rep)).tobytes()


def test_compiled_start_fails_where_blend_start_does():
    """An empty face at its floors: no strictly feasible blend, the same error from both."""
    face = Face(np.ones((2, 1)), np.full(2, 5.0), np.ones(2), np.ones(2), np.array([1.0]), np.ones((2, 1), dtype=bool))
    x_opt = np.full((2, 1), 0.5)
    with pytest.raises(SolverError, match="no strictly feasible start"):
        blend_start(face, x_opt)
    with pytest.raises(SolverError, match="no strictly feasible start"):
        center_compiled.center_face(face, x_opt)


def test_kernels_match_numpy_on_max_min_problems(monkeypatch):
    """Real max-min LPs (degenerate optimal faces, multiplicities): every centering agrees."""
    seen = []

    def both(face: Face, x_opt: np.ndarray, centering: center.Centering | None = None) -> np.ndarray:
        x_rep = repair(face, x_opt)
        lowered = problem.capped(face, x_rep)
        x0 = blend_start(lowered, x_rep)
        expected = center_numpy(lowered, x0)
        got = center_compiled.analytic_center(lowered, x0)
        whole = center_compiled.center_capped(face, x_opt)
        seen.append(got.tobytes() == expected.tobytes() == whole.tobytes())
        return expected

    monkeypatch.setattr(problem, "center_capped", both)
    rng = np.random.default_rng(7)
    for _ in range(30):
        m, n = int(rng.integers(2, 60)), int(rng.integers(1, 5))
        tp = rng.choice([0.0, 0.5, 1.0, 1.7, 3.2], (m, n), p=[0.15, 0.2, 0.3, 0.2, 0.15])
        tp[:, 0] = np.maximum(tp[:, 0], 0.5)
        inp = Inputs(throughputs=tp, scale_factors=rng.choice([1.0, 2.0, 4.0], m), weights=np.ones(m),
                     remaining=np.ones(m), age_s=np.zeros(m), capacities=rng.integers(1, 30, n).astype(float),
                     active=tp > 0)
        solve_max_min(tp * (1.0 / (tp.sum(axis=1) + 1.0))[:, None], inp)
    assert len(seen) >= 25 and all(seen)


def test_faces_outside_the_kernels_run_numpy():
    face = Face(np.ones((2, 9)), np.full(2, -np.inf), np.ones(2), np.ones(2), np.full(9, 4.0),
                np.ones((2, 9), dtype=bool))
    assert center_jit.fits(face)
    assert not center_jit.fits(Face(np.ones((1, 2)), np.zeros(1), np.ones(1), np.ones(1), np.ones(2),
                                    np.ones((1, 2), dtype=bool), socp=True))
    big = Face(np.ones((1100, 4)), np.full(1100, -np.inf), np.ones(1100), np.ones(1100), np.full(4, 1e4),
               np.ones((1100, 4), dtype=bool))
    assert not center_jit.fits(big)
    x = center.analytic_center(face, interior_point(face))  # capacity to spare: the simplex's center
    assert x == pytest.approx(np.full((2, 9), 0.1), abs=1e-3)  # (the capacity rows pull a little)
    assert center_compiled.analytic_center(face, interior_point(face)).tobytes() == x.tobytes()


def test_einsum_order_is_what_the_code_computed_before():
    """The Newton step's contractions in the order ``einsum`` summed them (NumPy 2.x, x86-64)."""
    rng = np.random.default_rng(3)
    for r in range(1, 12):
        b_v = (rng.standard_normal((9, 4, 1 + r)) * np.exp(4.0 * rng.standard_normal((9, 4, 1 + r))))[:, :, 1:]
        w = rng.standard_normal(r)
        assert center._two_lanes(b_v * w).tobytes() == np.einsum("mnr,r->mn", b_v, w).tobytes()
        v = rng.random((9, 4, r))
        assert center._running_sum(v[:, :, :, None] * b_v[:, :, None, :]).tobytes() == \
            np.einsum("mnr,mnq->rq", v, b_v).tobytes()


def test_dispatch_uses_the_kernels_after_the_first_centerings(monkeypatch):
    center._load_kernels.cache_clear()
    assert center._load_kernels() is center_compiled  # its self-check on a small face passed
    face = Face(np.ones((2, 3)), np.full(2, -np.inf), np.ones(2), np.ones(2), np.full(3, 4.0),
                np.ones((2, 3), dtype=bool))
    centering = center.Centering(after=2)
    assert [centering.compiled_for(face) for _ in range(3)] == [None, None, center_compiled]  # short runs: NumPy
    assert centering.done == 2
    assert center.compiled_for(face, None) is None  # no centering given: NumPy
    monkeypatch.setenv("HADAR_NO_JIT", "1")
    center._load_kernels.cache_clear()
    assert centering.compiled_for(face) is None
    center._load_kernels.cache_clear()


def test_each_policy_counts_its_own_centerings():
    """The count is the policy's own state (no module-wide counter): two policies count apart, and
    a policy's count grows by one per centering of its decisions."""
    from hadar.policies import create
    from tests.unit._policy_states import state

    first, second = create("max_min_fairness_perf"), create("max_min_fairness_perf")
    assert first.centering is not second.centering
    st = state([{"rates": {"v100": 2.0, "k80": 1.0}}, {"rates": {"v100": 3.0, "k80": 0.5}, "sf": 2},
                {"rates": {"v100": 1.0, "k80": 1.0}}], {"v100": 2, "k80": 2})
    x1 = first.allocate(st)
    assert first.centering.done == 1 and second.centering.done == 0
    second.centering.expect_many()  # its first centering runs compiled: the same point to the bit
    x2 = second.allocate(st)
    assert second.centering.done == center.JIT_AFTER
    assert x1.fractions.tobytes() == x2.fractions.tobytes()
    assert x1.fractions.sum() > 0


def test_a_long_run_centers_compiled_from_its_first_face(monkeypatch, table):
    """``expect_many`` skips the NumPy warm-up of the policy it names; ``simulate`` calls it for
    workloads of LONG_RUN_JOBS jobs or more (a window's end counts for a generated one), the same
    points either way."""
    import hadar.sim.run as run
    from hadar.config import parse_cluster
    from hadar.policies import create
    from tests.helpers import job

    policy = create("max_min_fairness_perf")
    center.expect_many(policy)
    assert policy.centering.done == center.JIT_AFTER
    center.expect_many(create("fifo"))  # a policy that centers nothing: left as it is
    told = []
    monkeypatch.setattr(run.center, "expect_many", lambda *policy: told.append(True))
    jobs = [job(i, steps=2000.0, arrival=60.0 * i) for i in range(4)]
    short = run.simulate(jobs, parse_cluster("1:1:0"), table, "max_min_fairness_perf")
    assert told == []
    monkeypatch.setattr(run, "LONG_RUN_JOBS", 4)
    long = run.simulate(jobs, parse_cluster("1:1:0"), table, "max_min_fairness_perf")
    assert told == [True]
    assert long.summary["avg_jct_s"] == short.summary["avg_jct_s"]
