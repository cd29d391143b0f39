"""Registry of real workloads (job types ``hadar run`` can train).

Each mirrors one of Gavel's model families; the emulation takes its
per-GPU-type speed ratios from the ``mirrors`` row of Gavel's table.
"""

from __future__ import annotations

from hadar.errors import InputError
from hadar.runtime.workloads.base import TrainState, Workload
from hadar.runtime.workloads.image import DigitsResNet
from hadar.runtime.workloads.language import LstmLM, TinyTransformer
from hadar.runtime.workloads.recommendation import Recoder

_REGISTRY: dict[str, type[Workload]] = {w.name: w for w in (DigitsResNet, LstmLM, TinyTransformer, Recoder)}
#: short aliases accepted in job files
ALIASES = {"resnet": DigitsResNet.name, "lstm": LstmLM.name, "transformer": TinyTransformer.name,
           "recoder": Recoder.name}


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def resolve(job_type: str) -> str:
    """The registered name for ``job_type`` or an alias; unknown names raise ``InputError``."""
    name = ALIASES.get(job_type.strip().lower(), job_type)
    if name not in _REGISTRY:
        raise InputError(f"unknown runtime job type {job_type!r}; known: {', '.join(_REGISTRY)} "
                         f"(aliases: {', '.join(ALIASES)})")
    return name


def get(job_type: str) -> Workload:
    return _REGISTRY[resolve(job_type)]()


__all__ = ["ALIASES", "TrainState", "Workload", "get", "names", "resolve"]
