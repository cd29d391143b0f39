"""LPs straight to the HiGHS that SciPy bundles, without ``linprog``'s checks and conversions.

``scipy.optimize.linprog`` spends most of its time on a small LP in Python:
validating and copying its inputs, converting the matrix, and checking each
HiGHS option through SciPy's option manager. The simulator solves thousands
of such LPs, so :func:`solve` hands HiGHS the same model (columns in order,
the matrix in compressed-column form with sorted row indices, the row and
column bounds as given) under the options ``linprog`` sets, in a solver
object emptied before each call (one per thread): HiGHS then takes the
same path as on a fresh one and returns the same point, bit for bit. Three option sets are in use (:class:`Options`):

* :data:`DUAL`: dual simplex, no presolve, what ``linprog(method="highs-ds",
  options={"presolve": False})`` runs (Gavel's LPs, ``hadar.solve.lp``;
  ``tests/unit/test_policies_lp.py`` compares the two on max-min LPs).
* :data:`DUAL_PRESOLVE`: dual simplex after HiGHS's presolve, the answers
  of ``linprog(method="highs")`` (Hadar's keeper and horizon LPs;
  ``tests/unit/test_hadar_groups.py`` compares the two).
* :data:`PLAN`: Hadar's JCT plan, solved to 1e-9 by the primal simplex.

A :class:`Warm` holder carries a solve's final basis to the next solve: of
an LP with the same rows and columns (the same ``key``) as it is, and of an
LP whose rows and columns carry ``names`` (int64, one per column and one per
row) mapped by name: a column or row the last LP had keeps its status, a new
column starts nonbasic at its lower bound, a new row basic, and HiGHS mends
the count (an "alien" basis). The dual simplex then starts there and needs
tens of iterations rather than hundreds. Where an LP has several optimal
solutions, a warm start may end at another of them than a cold one; where a
warm start fails, the LP is solved again cold.

The binding is SciPy's private ``scipy.optimize._highspy._core`` (the module
``linprog`` itself calls, SciPy 1.15 on; ``.ci/constraints.txt`` pins the
SciPy this was checked against). Where it is missing or differs (another
SciPy), every call goes to ``linprog`` instead, with the same options.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from hadar.arrays import FloatArray, IntArray

try:  # SciPy's own HiGHS bindings (the ones linprog calls)
    from scipy.optimize._highspy import _core as _h
except ImportError:  # pragma: no cover - another SciPy layout: linprog below
    _h = None


@dataclass(frozen=True, slots=True)
class Options:
    """HiGHS options of a solve: ``presolve`` and ``solver`` as HiGHS names them ("off", "on",
    "choose"; "simplex", "choose"), ``strategy`` the simplex strategy (1: dual), ``edge_weights`` the
    dual simplex's pricing (-1: HiGHS chooses, 2: steepest edge), ``tolerance`` the primal and dual
    feasibility tolerances (None: HiGHS's, 1e-7), ``scale`` the simplex's scaling strategy (None:
    HiGHS's; 0: none)."""

    presolve: str
    solver: str
    strategy: int = 1
    edge_weights: int = -1
    tolerance: float | None = None
    scale: int | None = None

    @property
    def method(self) -> str:
        """The ``linprog`` method that runs these options (the fallback)."""
        return "highs-ds" if self.solver == "simplex" else "highs"


#: linprog(method="highs-ds", options={"presolve": False}): Gavel's LPs (any vertex will do, they are re-centered).
DUAL = Options(presolve="off", solver="simplex")
#: HiGHS's defaults but the dual simplex, linprog(method="highs")'s answers: Hadar's keeper and horizon LPs.
DUAL_PRESOLVE = Options(presolve="choose", solver="choose", edge_weights=2)
#: Hadar's JCT plan (``plan_lp``): feasibility tolerances of 1e-9, below the cost differences its tie
#: rule makes (down to about 1e-7), where its answer hardly depends on the start or the path
#: (bench/bench_plan_starts.py); so the cheapest path found: no scaling, the primal simplex
#: (docs/hadar.md, "The plan LP solved to 1e-9 by the primal simplex").
PLAN = Options(presolve="choose", solver="choose", strategy=4, tolerance=1e-9, scale=0)


class LPResult:
    """A solved LP: ``status`` 0 = optimal (else ``x`` and ``dual`` are empty, ``fun`` NaN); ``dual``:
    one per row, linprog's marginals' sign, converted from HiGHS's solution when first read (most of
    Hadar's LPs never read it)."""

    __slots__ = ("_dual", "fun", "message", "status", "x")

    def __init__(self, status: int, message: str, x: FloatArray | None = None, fun: float = math.nan,
                 dual: FloatArray | Any = None) -> None:
        self.status, self.message, self.fun = status, message, fun
        self.x = np.zeros(0) if x is None else x
        self._dual = dual  # an array, or HiGHS's solution (a copy: its row duals are read on demand)

    @property
    def dual(self) -> FloatArray:
        if self._dual is None:
            self._dual = np.zeros(0)
        elif not isinstance(self._dual, np.ndarray):
            self._dual = np.array(self._dual.row_dual, dtype=float)
        out: FloatArray = self._dual
        return out


class Basis:
    """A final simplex basis of the LP named ``key``, with its columns' and rows' ``names`` where
    given (int64 arrays' bytes). HiGHS's own basis object is kept as it came and started from as it
    is; its status codes (``cols``, ``rows``: a byte per column and row) are derived where needed (a
    mapped start, a comparison, a pickle) from ``basic``, the basic variables as HiGHS lists them
    (column j as j, row i as -1 - i; every nonbasic column of these LPs sits at its lower bound and
    every nonbasic row at its upper one: an equality row's two bounds are one value, which HiGHS may
    call either), or else read from the object (slow: a Python object per entry); two bases compare
    and pickle by them, as plain values."""

    __slots__ = ("_basic", "_codes", "_native", "key", "names")

    def __init__(self, key: Hashable, cols: bytes | None = None, rows: bytes | None = None,
                 names: tuple[bytes, bytes] | None = None, native: Any = None,
                 basic: tuple[IntArray, int, int] | None = None) -> None:
        self.key, self.names, self._native, self._basic = key, names, native, basic
        self._codes = None if cols is None else (cols, rows or b"")

    @property
    def codes(self) -> tuple[bytes, bytes]:
        if self._codes is None:
            if self._basic is not None:
                basic, n_col, n_row = self._basic
                cols, rows = np.full(n_col, _LOWER, dtype=np.uint8), np.full(n_row, _UPPER, dtype=np.uint8)
                cols[basic[basic >= 0]] = _BASIC
                rows[-1 - basic[basic < 0]] = _BASIC
                self._codes = (cols.tobytes(), rows.tobytes())
            else:
                self._codes = (bytes([v.value for v in self._native.col_status]),
                               bytes([v.value for v in self._native.row_status]))
        return self._codes

    @property
    def cols(self) -> bytes:
        return self.codes[0]

    @property
    def rows(self) -> bytes:
        return self.codes[1]

    def native(self) -> Any:
        """HiGHS's basis object."""
        if self._native is None:
            self._native = _hb(*self.codes)
        return self._native

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Basis) and (self.key, self.names, self.codes) == (other.key, other.names,
                                                                                  other.codes)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return Basis, (self.key, self.cols, self.rows, self.names)

    def __repr__(self) -> str:
        return f"Basis(key={self.key!r}, {len(self.cols)} columns, {len(self.rows)} rows)"


class Warm:
    """Holds the basis a warm start begins from, and receives the next solve's."""

    __slots__ = ("basis",)

    def __init__(self, basis: Basis | None = None) -> None:
        self.basis = basis


@dataclass(frozen=True, slots=True)
class Csc:
    """A constraint matrix column by column (SciPy's CSC arrays, row indices sorted in each column)."""

    indptr: npt.NDArray[np.integer[Any]]  # int32 as HiGHS takes them (SciPy's own index type otherwise)
    indices: npt.NDArray[np.integer[Any]]
    data: FloatArray
    shape: tuple[int, int]

    @classmethod
    def of(cls, rows: IntArray, cols: IntArray, vals: FloatArray, shape: tuple[int, int]) -> Csc:
        """From (row, column, value) triplets, at most one per cell (what scipy.sparse builds from
        them, without its checks and conversions)."""
        order = np.lexsort((rows, cols))
        indptr: IntArray = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=shape[1]))]).astype(np.int32)
        indices: IntArray = np.asarray(rows[order], dtype=np.int32)
        return cls(indptr, indices, np.asarray(vals[order], dtype=float), shape)

    @classmethod
    def from_sparse(cls, a: Any) -> Csc:
        """From any SciPy sparse matrix or array (converted to CSC, row indices sorted)."""
        csc = sp.csc_array(a)
        csc.sort_indices()
        return cls(csc.indptr, csc.indices, csc.data, (int(csc.shape[0]), int(csc.shape[1])))

    def sparse(self) -> sp.csc_matrix:
        return sp.csc_matrix((self.data, self.indices, self.indptr), shape=self.shape)


_NATIVE: dict[Options, Any] = {}
_LOCAL = threading.local()  # each thread's reusable HiGHS instance


def _native(options: Options) -> Any:
    """HiGHS's option object for ``options`` (built once), or None where the binding is missing or differs."""
    if _h is None:
        return None
    if options not in _NATIVE:
        try:
            opts = _h.HighsOptions()
            opts.presolve = options.presolve
            opts.solver = options.solver
            opts.simplex_strategy = options.strategy
            opts.simplex_dual_edge_weight_strategy = options.edge_weights
            if options.tolerance is not None:
                opts.primal_feasibility_tolerance = opts.dual_feasibility_tolerance = options.tolerance
            if options.scale is not None:
                opts.simplex_scale_strategy = options.scale
            opts.highs_debug_level = _h.HighsDebugLevel.kHighsDebugLevelNone
            opts.log_to_console = False
            opts.output_flag = False
        except (AttributeError, TypeError):  # a binding that differs from the one this was written for
            opts = None
        _NATIVE[options] = opts
    return _NATIVE[options]


def _instance() -> Any:
    """This thread's HiGHS instance, emptied by ``clearModel`` (no model, solution or basis left: the
    same answers as a new one, without building and freeing it)."""
    h = getattr(_LOCAL, "highs", None)
    if h is None:
        h = _LOCAL.highs = _h._Highs()
        _LOCAL.options = None
    else:
        h.clearModel()
    return h


@dataclass(frozen=True, slots=True)
class Start:
    """A solve's warm start: the ``warm`` holder, and the LP's ``key`` or columns' and rows' ``names``."""

    warm: Warm
    key: Hashable = None
    names: tuple[IntArray, IntArray] | None = None


def solve(c: FloatArray, a: Csc, row_upper: FloatArray, *, row_lower: FloatArray | None = None,
          col_lower: FloatArray | None = None, col_upper: FloatArray | None = None, options: Options = DUAL,
          start: Start | None = None) -> LPResult:
    """min ``c x`` s.t. ``row_lower <= a x <= row_upper`` (None: -inf; a row with a finite lower
    bound must be an equality for the fallback), ``col_lower <= x <= col_upper`` (None: 0 and
    +inf). With a ``start`` of a ``key``: from its holder's basis where that is of an LP with this
    key; of ``names``: from that basis mapped by name (module docstring); either leaves this solve's
    final basis there. Every solve runs in this thread's HiGHS instance, cleared first (``_instance``)."""
    n_row, n_col = a.shape
    cost = np.ascontiguousarray(c, dtype=float)
    hi = np.ascontiguousarray(row_upper, dtype=float)
    lo = np.full(n_row, -np.inf) if row_lower is None else np.ascontiguousarray(row_lower, dtype=float)
    lo_col = np.zeros(n_col) if col_lower is None else np.ascontiguousarray(col_lower, dtype=float)
    hi_col = np.full(n_col, np.inf) if col_upper is None else np.ascontiguousarray(col_upper, dtype=float)
    native = _native(options)
    if native is None:
        from hadar.solve.by_linprog import by_linprog  # another SciPy (rare): imported only then

        return by_linprog(cost, a, lo, hi, lo_col, hi_col, options)
    key, names = (None, None) if start is None else (start.key, start.names)
    named = None if names is None else (np.asarray(names[0], dtype=np.int64).tobytes(),
                                        np.asarray(names[1], dtype=np.int64).tobytes())
    begin, was = None, None if start is None else start.warm.basis
    if was is not None and key is not None and was.key == key:
        begin = was.native()
    elif was is not None and named is not None and was.names is not None:
        begin = was.native() if was.names == named else _mapped(was, named)
    keep = start is not None and (key is not None or names is not None)
    got = _run(native, cost, a, (lo, hi, lo_col, hi_col), begin, keep)
    if begin is not None and got[0].status != 0:  # a warm start that fails: solve it again, cold
        got = _run(native, cost, a, (lo, hi, lo_col, hi_col), None, keep)
    res, basis, basic = got
    if start is not None and keep:
        start.warm.basis = None if basis is None else Basis(key, names=named, native=basis, basic=basic)
    return res


def _run(native: Any, cost: FloatArray, a: Csc, bounds: tuple[FloatArray, ...], start: Any,
         keep: bool) -> tuple[LPResult, Any, tuple[IntArray, int, int] | None]:
    """One HiGHS solve of min ``cost x`` under ``bounds`` (rows' lower, upper, columns' lower, upper) in
    this thread's instance (from the basis ``start``, if given): its result and, with ``keep``, its
    final basis (HiGHS's object; None unless valid) and, where every nonbasic column is at its lower
    bound and every nonbasic row at its upper one (no finite column upper bound, every row an
    equality or without a lower bound), the basic variables as :class:`Basis` takes them."""
    lo, hi, lo_col, hi_col = bounds
    n_row, n_col = a.shape
    h: Any = _instance()
    if getattr(_LOCAL, "options", None) is not native:  # the instance keeps its options (clearModel leaves them)
        if h.passOptions(native) == _h.HighsStatus.kError:
            _LOCAL.options = None
            return LPResult(4, "HiGHS rejected the options"), None, None
        _LOCAL.options = native
    # the model from arrays (column-wise, minimize, no offset): numpy buffers, not element by element
    if h.passModel(
            n_col, n_row, int(a.indptr[-1]), int(_h.MatrixFormat.kColwise), int(_h.ObjSense.kMinimize), 0.0, cost,
            lo_col, hi_col, lo, hi, np.asarray(a.indptr, dtype=np.int32), np.asarray(a.indices, dtype=np.int32),
            np.asarray(a.data, dtype=float), np.zeros(n_col, dtype=np.int32)) == _h.HighsStatus.kError:
        return LPResult(4, "HiGHS rejected the model"), None, None
    if start is not None:
        h.setBasis(start)
    if h.run() == _h.HighsStatus.kError:
        return LPResult(4, "HiGHS failed: " + h.modelStatusToString(h.getModelStatus())), None, None
    status = h.getModelStatus()
    if status != _h.HighsModelStatus.kOptimal:
        code = 2 if status == _h.HighsModelStatus.kInfeasible else 3 if status == _h.HighsModelStatus.kUnbounded else 4
        return LPResult(code, "model status " + h.modelStatusToString(status)), None, None
    sol = h.getSolution()
    got = h.getBasis() if keep else None
    basis = got if got is not None and got.valid else None
    basic = None
    if basis is not None and np.isfinite(hi).all() and not np.isfinite(hi_col).any() and \
            bool(np.all((lo == hi) | ~np.isfinite(lo))):
        basic = (np.asarray(h.getBasicVariables()[1], dtype=np.int64), n_col, n_row)
    return LPResult(0, "optimal", np.array(sol.col_value, dtype=float), float(h.getObjectiveValue()), sol), basis, basic


def minimize(c: FloatArray, a: Csc | sp.csr_matrix | sp.csc_matrix, upper: FloatArray, *,
             lower: FloatArray | None = None, col_upper: FloatArray | None = None, start: Start | None = None,
             options: Options = DUAL_PRESOLVE) -> LPResult | None:
    """Hadar's LPs (``options``: :data:`DUAL_PRESOLVE` or :data:`PLAN`): min ``c x`` s.t. ``lower <=
    a x <= upper`` (``lower`` None: -inf; a row with a finite lower bound must be an equality, lower =
    upper), ``0 <= x <= col_upper`` (None: +inf). Rows in the order linprog stacks them
    (inequalities, then equalities) give linprog's answer under :data:`DUAL_PRESOLVE`. None unless
    HiGHS reports an optimum; ``start``: as :func:`solve`."""
    res = solve(c, a if isinstance(a, Csc) else Csc.from_sparse(a), upper, row_lower=lower, col_upper=col_upper,
                options=options, start=start)
    return res if res.status == 0 else None


def solve_highs(c: FloatArray, a_ub: sp.spmatrix | Csc, b_ub: FloatArray, bounds: FloatArray) -> LPResult:
    """Gavel's LPs (:data:`DUAL`): minimize ``c @ z`` s.t. ``a_ub @ z <= b_ub``, ``bounds[:, 0] <= z
    <= bounds[:, 1]``.

    Raises ``ValueError`` on NaN anywhere or infinite costs or coefficients (as ``linprog`` does).
    """
    c = np.ascontiguousarray(c, dtype=float)
    b = np.asarray(b_ub, dtype=float)
    bnd = np.asarray(bounds, dtype=float)
    a = a_ub if isinstance(a_ub, Csc) else Csc.from_sparse(a_ub)
    if a.shape != (b.size, c.size) or bnd.shape != (c.size, 2):
        raise ValueError("inconsistent shapes of the costs, constraints and bounds")
    if not (np.isfinite(c).all() and np.isfinite(a.data).all()) or np.isnan(b).any() or np.isnan(bnd).any():
        raise ValueError("NaN or infinite values in the costs or constraints")
    return solve(c, a, b, col_lower=bnd[:, 0], col_upper=bnd[:, 1], options=DUAL)


_LOWER, _BASIC, _UPPER = 0, 1, 2  # HiGHS's basis status codes: nonbasic at the lower bound, basic, at the upper


_STATUS: list[Any] = []  # HiGHS's basis status objects as an object array indexed by code (built on first use)


def _hb(cols: bytes | npt.NDArray[np.uint8], rows: bytes | npt.NDArray[np.uint8], alien: bool = False) -> Any:
    """HiGHS's basis object from status codes per column and row."""
    if not _STATUS:
        _STATUS.append(np.array(list(_h.HighsBasisStatus.__members__.values()), dtype=object))
    status = _STATUS[0]
    hb = _h.HighsBasis()
    hb.col_status = status[np.frombuffer(cols, dtype=np.uint8) if isinstance(cols, bytes) else cols].tolist()
    hb.row_status = status[np.frombuffer(rows, dtype=np.uint8) if isinstance(rows, bytes) else rows].tolist()
    hb.valid = True
    hb.alien = alien
    return hb


def _mapped(basis: Basis, names: tuple[bytes, bytes]) -> Any:
    """``basis`` carried onto an LP with these (columns', rows') ``names`` (module docstring)."""
    assert basis.names is not None
    cols = _carry(basis.names[0], basis.cols, names[0], _LOWER)
    rows = _carry(basis.names[1], basis.rows, names[1], _BASIC)
    return _hb(cols, rows, alien=True)


def _carry(old: bytes, status: bytes, names: bytes, default: int) -> npt.NDArray[np.uint8]:
    """Per name in ``names``: its status among the ``old`` names (``status``), else ``default``."""
    was, st, new = (np.frombuffer(old, dtype=np.int64), np.frombuffer(status, dtype=np.uint8),
                    np.frombuffer(names, dtype=np.int64))
    out = np.full(new.size, default, dtype=np.uint8)
    if was.size > 0 and new.size > 0:
        order = np.argsort(was, kind="stable")
        pos = np.minimum(np.searchsorted(was[order], new), was.size - 1)
        hit = was[order][pos] == new
        out[hit] = st[order][pos][hit]
    return out
