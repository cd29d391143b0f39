"""One LP, straight to the HiGHS that SciPy bundles, without ``linprog``'s checks and conversions.

``scipy.optimize.linprog(method="highs-ds", options={"presolve": False})``
spends most of its time on a 30-job LP in Python: validating and copying its
inputs, converting the matrix, and checking each HiGHS option through SciPy's
option manager. The simulator solves thousands of such LPs, so
:func:`solve_highs` hands HiGHS the same model (columns in order, the matrix
in compressed-column form with sorted indices, ``-inf`` row lower bounds, the
bounds as given) under the same options that ``linprog`` sets for that method
(dual simplex, no presolve, no output), on a fresh solver object each call:
HiGHS then takes the same path and returns the same point, bit for bit
(``tests/unit/test_policies_lp.py`` compares the two on max-min LPs; every LP of eight LP-based
policies' runs on the 96-job trace matched too when this was written).

The binding is SciPy's private ``scipy.optimize._highspy._core`` (the module
``linprog`` itself calls, SciPy 1.15 on); where it is missing or differs (another
SciPy), :func:`solve_highs` calls ``linprog`` instead, with the same result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from hadar.arrays import FloatArray

try:
    from scipy.optimize._highspy import _core as _h
except ImportError:  # another SciPy: linprog below
    _h = None


@dataclass(frozen=True, slots=True)
class LPResult:
    """What the policies read of a solved LP: ``status`` 0 = optimal (else ``x`` is empty, ``fun`` NaN)."""

    status: int
    message: str
    x: FloatArray = field(default_factory=lambda: np.zeros(0))
    fun: float = math.nan


def _options() -> Any:
    if _h is None:
        return None
    opts = _h.HighsOptions()
    opts.presolve = "off"
    opts.solver = "simplex"
    opts.simplex_strategy = _h.simplex_constants.SimplexStrategy.kSimplexStrategyDual
    opts.highs_debug_level = _h.HighsDebugLevel.kHighsDebugLevelNone
    opts.log_to_console = False
    opts.output_flag = False
    return opts


try:
    _OPTIONS = _options()
except (AttributeError, TypeError):  # a binding that differs from the one this was written for
    _OPTIONS = None


def solve_highs(c: FloatArray, a_ub: sp.spmatrix, b_ub: FloatArray, bounds: FloatArray) -> LPResult:
    """Minimize ``c @ z`` s.t. ``a_ub @ z <= b_ub``, ``bounds[:, 0] <= z <= bounds[:, 1]`` (dual simplex).

    Raises ``ValueError`` on NaN anywhere or infinite costs or coefficients (as ``linprog`` does).
    """
    c = np.ascontiguousarray(c, dtype=float)
    b = np.asarray(b_ub, dtype=float)
    bnd = np.asarray(bounds, dtype=float)
    a = sp.csc_array(a_ub)
    if a.shape != (b.size, c.size) or bnd.shape != (c.size, 2):
        raise ValueError("inconsistent shapes of the costs, constraints and bounds")
    if not (np.isfinite(c).all() and np.isfinite(a.data).all()) or np.isnan(b).any() or np.isnan(bnd).any():
        raise ValueError("NaN or infinite values in the costs or constraints")
    if _OPTIONS is None:
        return _via_linprog(c, a, b, bnd)
    a.sort_indices()
    lp = _h.HighsLp()
    lp.num_col_, lp.num_row_ = c.size, b.size
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = c.size, b.size
    lp.a_matrix_.format_ = _h.MatrixFormat.kColwise
    lp.col_cost_ = c
    lp.col_lower_ = np.ascontiguousarray(bnd[:, 0])
    lp.col_upper_ = np.ascontiguousarray(bnd[:, 1])
    lp.row_lower_ = np.full(b.size, -np.inf)
    lp.row_upper_ = b
    lp.a_matrix_.start_ = a.indptr
    lp.a_matrix_.index_ = a.indices
    lp.a_matrix_.value_ = a.data
    highs = _h._Highs()
    if highs.passOptions(_OPTIONS) == _h.HighsStatus.kError or highs.passModel(lp) == _h.HighsStatus.kError:
        return LPResult(4, "HiGHS rejected the model")
    if highs.run() == _h.HighsStatus.kError:
        return LPResult(4, "HiGHS failed: " + highs.modelStatusToString(highs.getModelStatus()))
    status = highs.getModelStatus()
    if status != _h.HighsModelStatus.kOptimal:
        code = 2 if status == _h.HighsModelStatus.kInfeasible else 3 if status == _h.HighsModelStatus.kUnbounded else 4
        return LPResult(code, "model status " + highs.modelStatusToString(status))
    x = np.array(highs.getSolution().col_value)
    return LPResult(0, "optimal", x, float(highs.getInfo().objective_function_value))


def _via_linprog(c: FloatArray, a: sp.csc_array, b: FloatArray, bounds: FloatArray) -> LPResult:
    from scipy.optimize import linprog

    res = linprog(c, A_ub=a, b_ub=b, bounds=bounds, method="highs-ds", options={"presolve": False})
    if res.status != 0 or res.x is None:
        return LPResult(int(res.status) or 4, str(res.message))
    return LPResult(0, "optimal", np.asarray(res.x, dtype=float), float(res.fun))
