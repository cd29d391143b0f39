"""What a change of the ledger changed, and what a resumed job brings with it.

Every method of ``JobLedger`` that changes scheduling state returns a ``Changes``; the engine hands
it to the cadence (is a re-solve due?) and the recorder (what to commit). No flag is set from outside.
"""

from __future__ import annotations

from dataclasses import dataclass

from hadar.model.throughput import ThroughputTable

#: A measured rate (alone or co-located) that moves by more than this share of what the policy saw
#: is a change worth a re-solve.
MOVED_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class Changes:
    """What one change of the ledger changed (each a reason the cadence may re-solve)."""

    arrived: tuple[int, ...] = ()
    ended: tuple[int, ...] = ()  # finished or failed for good, in the ledger's (id) order
    cancelled: tuple[int, ...] = ()
    cluster: bool = False  # nodes went down, came back or joined
    rates_moved: bool = False  # a measured rate moved by more than ``MOVED_SHARE``

    def __bool__(self) -> bool:
        return bool(self.arrived or self.ended or self.cancelled or self.cluster or self.rates_moved)


NOTHING = Changes()


@dataclass(frozen=True, slots=True)
class Resumed:
    """The progress a job resumed from a record had (a restarted service): ``done_steps`` in its latest
    checkpoint and the counts its record kept."""

    done_steps: float = 0.0
    attained_gpu_s: float = 0.0
    first_start_s: float | None = None
    rounds_run: int = 0
    restarts: int = 0
    steps_by_type: tuple[tuple[str, float], ...] = ()


def pairs_moved(old: ThroughputTable, new: ThroughputTable, job_types: set[str], share: float) -> bool:
    """Whether a co-located rate of two of ``job_types`` moved by more than ``share`` of its old value."""
    for (a, k, b), per_type in new.pairs.items():
        if a not in job_types or b not in job_types:
            continue
        before = old.pairs.get((a, k, b), {})
        for t, (rate, _) in per_type.items():
            was = before.get(t, (0.0, 0.0))[0]
            if was > 0 and abs(rate - was) > share * was:
                return True
    return False
