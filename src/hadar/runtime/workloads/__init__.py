"""The bundled workloads: four small models written on the job API (``hadar.job``), runnable by alias.

A job file's ``job_type: resnet`` (or the full name) is shorthand for the entrypoint job
``entrypoint: hadar.runtime.workloads.image:train`` with that workload's throughput key,
quality metric and emulated speed ratios (``emulate_as``: the Gavel model it mirrors).
``resolve_job`` turns it into that spec; nothing else in the runtime knows these workloads.
"""

from __future__ import annotations

import dataclasses

from hadar.errors import InputError
from hadar.model.job import Job, TrainSpec
from hadar.runtime.workloads.base import Workload
from hadar.runtime.workloads.image import DigitsResNet
from hadar.runtime.workloads.language import LstmLM, TinyTransformer
from hadar.runtime.workloads.recommendation import Recoder

#: registered name -> (workload class, entrypoint of its train function)
_REGISTRY: dict[str, tuple[type[Workload], str]] = {
    DigitsResNet.name: (DigitsResNet, "hadar.runtime.workloads.image:train"),
    LstmLM.name: (LstmLM, "hadar.runtime.workloads.language:train_lstm"),
    TinyTransformer.name: (TinyTransformer, "hadar.runtime.workloads.language:train_transformer"),
    Recoder.name: (Recoder, "hadar.runtime.workloads.recommendation:train"),
}
#: short aliases accepted in job files
ALIASES = {cls.alias: name for name, (cls, _) in _REGISTRY.items()}


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def resolve(job_type: str) -> str:
    """The registered name for ``job_type`` or an alias; unknown names raise ``InputError``."""
    name = ALIASES.get(job_type.strip().lower(), job_type)
    if name not in _REGISTRY:
        raise InputError(f"unknown runtime job type {job_type!r}; known: {', '.join(_REGISTRY)} "
                         f"(aliases: {', '.join(ALIASES)}), or give an entrypoint")
    return name


def get(job_type: str) -> Workload:
    return _REGISTRY[resolve(job_type)][0]()


def entrypoint(job_type: str) -> str:
    return _REGISTRY[resolve(job_type)][1]


def resolve_job(job: Job) -> Job:
    """``job`` as the runtime runs it: a bundled ``job_type`` becomes its entrypoint spec (fields the job
    file gave, such as ``max_failures`` or ``args``, kept); an entrypoint job passes unchanged, unless its
    name (its throughput key) is taken by a bundled workload."""
    spec = job.train
    where = job.origin or f"job {job.job_id}"
    if spec is not None and spec.entrypoint:
        bundled = job.job_type in _REGISTRY and spec.entrypoint == _REGISTRY[job.job_type][1]  # resolved already
        if not bundled and (spec.name in _REGISTRY or spec.name.lower() in ALIASES):
            raise InputError(f"{where}: the name {spec.name!r} belongs to a bundled workload; choose another")
        return job
    name = resolve(job.job_type)
    wl = get(name)
    base = spec or TrainSpec(entrypoint="")
    full = dataclasses.replace(base, entrypoint=entrypoint(name), name=base.name or wl.alias,
                               emulate_as=base.emulate_as or wl.mirrors, quality=base.quality or wl.quality)
    return dataclasses.replace(job, job_type=name, train=full)


__all__ = ["ALIASES", "Workload", "entrypoint", "get", "names", "resolve", "resolve_job"]
