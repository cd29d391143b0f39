"""The simulated world: facts of the cluster a run happens in, not any policy's estimates.

How a gang spanning GPU types progresses, what a forked copy's steps are worth and whether a restart
costs time are settings of the world, owned by the simulated executor (on a real cluster they are
measured). Every policy of a comparison runs in one world, and the summary records which; a policy
holds its own estimates, passed to it explicitly (Hadar's ``rate_model``, the forking planner's
fork efficiency).
"""

from __future__ import annotations

from dataclasses import dataclass

from hadar.model.fork_efficiency import IDEAL, ForkEfficiency
from hadar.model.fork_model import ForkModel

RATE_MODELS = ("sync", "additive")


@dataclass(frozen=True, slots=True)
class World:
    """``rate_model``: a lease on several GPU types runs at its slowest type's pace (``sync``) or each GPU
    adds its share (``additive``: only with local batches in proportion to each GPU's speed);
    ``fork_efficiency``: what k forked copies' steps are worth (a per-doubling ``ForkEfficiency``, or the
    noise-scale ``ForkModel``: data parallelism at the copies' summed batch); ``charge_restarts``: a lease that is not
    extended first spends its job's restart cost restoring (Gavel's world charges none)."""

    rate_model: str = "sync"
    fork_efficiency: ForkEfficiency | ForkModel = IDEAL
    charge_restarts: bool = True

    def __post_init__(self) -> None:
        if self.rate_model not in RATE_MODELS:
            raise ValueError(f"unknown rate model {self.rate_model!r} (sync or additive)")

    def describe(self) -> dict[str, object]:
        """The world as a run's summary records it."""
        out: dict[str, object] = {
            "rate_model": self.rate_model, "charge_restarts": self.charge_restarts,
            "fork_efficiency": "ideal" if self.fork_efficiency.ideal else (self.fork_efficiency.source or "calibrated")}
        if isinstance(self.fork_efficiency, ForkModel):
            out["fork_model"] = self.fork_efficiency.describe()
        return out
