"""A Gavel LP over job classes: HiGHS for the optimum, then the centered point.

``ClassProblem`` collapses identical jobs (same coefficients, scale factor,
demand flag) into one row of multiplicity ``k``; every Gavel policy treats
identical jobs identically, so this is exact and makes the LP size depend on
the number of distinct job kinds rather than on the number of jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from hadar.arrays import BoolArray, FloatArray
from hadar.policies.gavel.center import FACE_TOL, Centering, Face, blend_start, center_numpy, compiled_for, repair
from hadar.policies.gavel.common import Classes
from hadar.solve.lp import Variables, maxmin_lp, scale_to_unit


@dataclass(frozen=True, slots=True)
class ClassProblem:
    """Rows = classes of the jobs in ``classes.rows``; ``a = coef * factor`` (scaled for HiGHS)."""

    classes: Classes
    a: FloatArray  # (c, n)
    factor: float
    k: FloatArray  # (c,)
    s: FloatArray  # (c,)
    active: BoolArray  # (c, n)
    demand: BoolArray  # (c,): the row has a demand constraint a . x >= g
    capacities: FloatArray  # (n,)
    var: Variables
    centering: Centering | None = None  # the policy's (when its centerings run compiled); None: NumPy

    @classmethod
    def build(
        cls,
        coef: FloatArray,
        scale_factors: FloatArray,
        capacities: FloatArray,
        active: BoolArray,
        demand: BoolArray | None = None,
        extra_features: tuple[FloatArray, ...] = (),
        centering: Centering | None = None,
    ) -> ClassProblem:
        """Keep the jobs with an active entry (and, with a demand, a positive coefficient); ``demand``
        defaults to all kept rows; ``centering``: the policy's (``Inputs.centering``)."""
        m = coef.shape[0]
        demand = np.ones(m, dtype=bool) if demand is None else demand
        coef = np.where(active, coef, 0.0)
        # A row takes part if it can run somewhere and, when it has a demand, can meet it.
        alive = active.any(axis=1) & (~demand | (coef > 0).any(axis=1))
        classes = Classes.of(alive, coef, scale_factors, demand.astype(float), active.astype(float), *extra_features)
        a, factor = scale_to_unit(classes.take(coef))
        act = classes.take(active)
        return cls(classes, a, factor, classes.counts, classes.take(scale_factors), act,
                   classes.take(demand), np.asarray(capacities, dtype=float), Variables.of(act), centering)

    @property
    def size(self) -> int:
        return int(self.k.size)

    def max_min(self, free: BoolArray | None = None, floors: FloatArray | None = None,
                what: str = "max-min LP") -> tuple[float, FloatArray]:
        """HiGHS: maximize the smallest ``a_i . x_i`` over ``free`` demand rows (scaled units)."""
        free = self.demand if free is None else free
        return maxmin_lp(self.var, self.a, self.k * self.s, self.capacities, free, floors, what)

    def face(self, g: FloatArray, *, socp: bool = False, a: FloatArray | None = None,
             c: FloatArray | None = None, c_floor: float = 0.0) -> Face:
        g = np.where(self.demand, g, -np.inf)
        return Face(self.a if a is None else a, g, self.k, self.s, self.capacities, self.active,
                    c=c, c_floor=c_floor, socp=socp)

    def centered(self, g: FloatArray, x_opt: FloatArray, *, c: FloatArray | None = None, c_floor: float = 0.0,
                 socp: bool = False) -> FloatArray:
        """Analytic center of ``{base, a_i . x_i >= g_i}`` started next to the solver point ``x_opt``.

        Floors are capped just below what the repaired ``x_opt`` achieves, so
        solver round-off can never leave the face empty (``center.center_capped``).
        """
        return center_capped(self.face(g, c=c, c_floor=c_floor, socp=socp), x_opt, self.centering)

    def expand(self, x_cls: FloatArray, m: int) -> FloatArray:
        return self.classes.expand(x_cls, m)


def fattened(level: float | FloatArray) -> FloatArray | float:
    """An optimal level lowered by the face tolerance (keeps the face full-dimensional)."""
    return level - FACE_TOL * np.abs(level)


def capped(face: Face, x_rep: FloatArray) -> Face:
    """``face`` with its floors (and its global floor) lowered to just below what the point ``x_rep``
    achieves, so solver round-off can never leave the face empty."""
    g = np.minimum(face.g, np.asarray(fattened((face.a * x_rep).sum(axis=1))))
    c_floor = face.c_floor
    if face.c is not None:
        c_floor = min(c_floor, float(fattened(float((face.k[:, None] * face.c * x_rep).sum()))))
    return Face(face.a, g, face.k, face.s, face.capacities, face.active, c=face.c, c_floor=c_floor, socp=face.socp)


def center_capped(face: Face, x_opt: FloatArray, centering: Centering | None = None) -> FloatArray:
    """``center.center_face`` of ``face`` :func:`capped` at the repaired solver point ``x_opt``, started
    there (compiled where ``center.analytic_center`` would be)."""
    if face.a.shape[0] == 0:
        return np.zeros(face.a.shape)
    if (jit := compiled_for(face, centering)) is not None:
        return cast(FloatArray, jit.center_capped(face, x_opt))
    x_rep = repair(face, x_opt)
    face = capped(face, x_rep)
    return center_numpy(face, blend_start(face, x_rep))
