"""CPU-independent arithmetic (hadar.numeric): right answers, from element-wise operations only."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from hadar.numeric import SparseLDL, cholesky_solve, dot, matvec, norm


def test_dot_norm_matvec_are_the_textbook_values():
    a = np.array([1.0, 2.0, 3.0])
    b = np.array([4.0, -5.0, 6.0])
    assert dot(a, b) == 12.0
    assert norm(np.array([3.0, 4.0])) == 5.0
    m = np.array([[1.0, 2.0, 3.0], [0.0, 1.0, 0.0]])
    assert matvec(m, b).tolist() == [12.0, -5.0]
    assert dot(np.zeros(0), np.zeros(0)) == 0.0


def test_batched_cholesky_solves_spd_systems_with_several_right_hand_sides():
    rng = np.random.default_rng(3)
    m, n, r = 50, 4, 3
    q = rng.standard_normal((m, n, n))
    h = q @ q.transpose(0, 2, 1) + 0.1 * np.eye(n)  # SPD (numpy here only builds the test data)
    b = rng.standard_normal((m, n, r))
    x = cholesky_solve(h, b)
    assert np.abs(np.einsum("mij,mjr->mir", h, x) - b).max() < 1e-9
    x1 = cholesky_solve(h, b[:, :, 0])
    assert x1.shape == (m, n) and np.abs(x1 - x[:, :, 0]).max() == 0.0


def test_cholesky_rejects_an_indefinite_matrix():
    with pytest.raises(np.linalg.LinAlgError):
        cholesky_solve(np.array([[[1.0, 2.0], [2.0, 1.0]]]), np.ones((1, 2)))


def test_sparse_ldl_solves_a_quasi_definite_system():
    k = sp.csc_matrix(np.array([[4.0, 1.0, 2.0], [1.0, 3.0, 0.0], [2.0, 0.0, -5.0]]))
    b = np.array([1.0, 2.0, 3.0])
    x = SparseLDL(k).solve(b)
    assert np.abs(k @ x - b).max() < 1e-12


def test_a_batch_of_one_gives_the_batched_solves_bits():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((6, 4, 4))
    h = q @ q.transpose(0, 2, 1) + 0.1 * np.eye(4)  # SPD (numpy here only builds the test data)
    b = rng.standard_normal((6, 4, 2))
    batch = cholesky_solve(h, b)
    for i in range(6):
        assert cholesky_solve(h[i : i + 1], b[i : i + 1]).tobytes() == batch[i : i + 1].tobytes()
    with pytest.raises(np.linalg.LinAlgError):
        cholesky_solve(np.array([[[1.0, 2.0], [2.0, 1.0]]]), np.ones((1, 2, 1)))
