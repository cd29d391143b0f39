"""An LP of ``hadar.solve.highs`` through ``scipy.optimize.linprog``, where SciPy's HiGHS binding is
missing or differs from the one that module was written for: the same options (presolve, the
simplex), rows with a finite lower bound as equalities."""

from __future__ import annotations

import numpy as np

from hadar.arrays import FloatArray
from hadar.solve.highs import Csc, LPResult, Options


def by_linprog(c: FloatArray, a: Csc, lo: FloatArray, hi: FloatArray, lo_col: FloatArray, hi_col: FloatArray,
               options: Options) -> LPResult:
    """The same LP through ``linprog`` (rows with a finite lower bound as equalities)."""
    from scipy.optimize import linprog

    eq = np.isfinite(lo)
    m = a.sparse()
    ub, has_eq = (m[~eq] if eq.any() else m), bool(eq.any())
    res = linprog(c, A_ub=ub if (~eq).any() else None, b_ub=hi[~eq] if (~eq).any() else None,
                  A_eq=m[eq] if has_eq else None, b_eq=hi[eq] if has_eq else None,
                  bounds=np.column_stack([lo_col, hi_col]), method=options.method,
                  options={"presolve": options.presolve != "off"})
    if res.status != 0 or res.x is None:
        return LPResult(int(res.status) or 4, str(res.message))
    dual = np.zeros(a.shape[0])
    if (~eq).any():
        dual[~eq] = res.ineqlin.marginals
    if has_eq:
        dual[eq] = res.eqlin.marginals
    return LPResult(0, "optimal", np.asarray(res.x, dtype=float), float(res.fun), dual)
