"""The job-file fields of a user job (``entrypoint``, ``gpus``, ``args``, ...), parsed into a ``TrainSpec``.

A job record either names a bundled workload (``job_type: resnet``) or a function
(``entrypoint: FILE.py:FUNCTION | package.module:FUNCTION``); both may carry the other
fields. ``gpus`` is a synonym of ``scale_factor``. The runtime resolves a bundled
``job_type`` into the same kind of spec (``hadar.runtime.workloads.resolve_job``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hadar.errors import InputError
from hadar.model.job import TrainSpec

#: the fields a job record may have besides job_type, scale_factor, total_steps, arrival_s, priority_weight
TRAIN_FIELDS = ("name", "entrypoint", "gpus", "args", "max_failures", "profile", "emulate_as", "quality", "target")
DEFAULT_MAX_FAILURES = 3


def job_fields(rec: Mapping[str, Any], where: str, index: int,
               folder: Path | None) -> tuple[str, Any, TrainSpec | None]:
    """(job_type, scale factor as written, train spec or None) of one job record.

    An ``entrypoint`` job's job type (its key in the throughput table) is its ``name``
    (default ``FUNCTION-INDEX``); a ``job_type`` job with any of the train fields gets a spec
    with an empty entrypoint, completed by the runtime from the bundled workload.
    """
    entry = rec.get("entrypoint")
    if entry is not None and rec.get("job_type") not in (None, ""):
        raise InputError(f"{where}: give either job_type (a bundled workload) or entrypoint, not both")
    if entry is None and rec.get("job_type") in (None, ""):
        raise InputError(f"{where}: missing job_type or entrypoint")
    scale = _scale(rec, where)
    given = {k for k in TRAIN_FIELDS if k in rec and k != "gpus"}
    if entry is None:
        job_type = str(rec["job_type"]).strip()
        if not given:
            return job_type, scale, None
        return job_type, scale, _spec(rec, where, "", str(rec.get("name") or job_type).strip(), folder)
    if not isinstance(entry, str) or ":" not in entry.strip(":"):
        raise InputError(f"{where}: entrypoint must be FILE.py:FUNCTION or package.module:FUNCTION, got {entry!r}")
    func = entry.rsplit(":", 1)[1].strip()
    name = str(rec.get("name") or f"{func}-{index}").strip()
    return name, scale, _spec(rec, where, entry.strip(), name, folder)


def _scale(rec: Mapping[str, Any], where: str) -> Any:
    gpus, sf = rec.get("gpus"), rec.get("scale_factor")
    if gpus is not None and sf is not None and str(gpus) != str(sf):
        raise InputError(f"{where}: gpus ({gpus}) and scale_factor ({sf}) disagree (they are synonyms)")
    return gpus if gpus is not None else (sf if sf is not None else 1)


def _spec(rec: Mapping[str, Any], where: str, entry: str, name: str, folder: Path | None) -> TrainSpec:
    if not name or any(c in name for c in "/\\\n\r\t") or name in (".", ".."):
        raise InputError(f"{where}: name must be a non-empty single-line string without slashes, got {name!r}")
    quality = str(rec.get("quality") or "").strip()
    if quality.lstrip("-") == "" and quality:
        raise InputError(f"{where}: quality must name a reported metric (e.g. accuracy, or -loss for lower is better)")
    search = tuple(dict.fromkeys(str(p) for p in ((folder.resolve(),) if folder is not None else ()) + (Path.cwd(),)))
    try:
        return TrainSpec(entrypoint=entry, name=name, args_json=args_json(rec.get("args"), where),
                         max_failures=_count(rec.get("max_failures", DEFAULT_MAX_FAILURES), "max_failures", where),
                         profile=_flag(rec.get("profile", False), "profile", where),
                         emulate_as=str(rec.get("emulate_as") or "").strip(), quality=quality, search_path=search,
                         target=_target(rec.get("target"), where))
    except InputError as e:
        raise InputError(f"{where}: {str(e).split(': ', 1)[-1]}") from None


def _target(value: Any, where: str) -> float | None:
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: target must be a number (a value of the job's quality metric), "
                         f"got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number):
        raise InputError(f"{where}: target must be a finite number, got {value!r}")
    return number


def args_json(args: Any, where: str) -> str:
    """The job's ``args`` as canonical JSON: a mapping of strings to JSON values, finite numbers only."""
    if args is None:
        return "{}"
    if isinstance(args, str):  # a CSV cell or a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            raise InputError(f"{where}: args must be a mapping (in CSV: a JSON object), got {args!r}") from None
    if not isinstance(args, Mapping):
        raise InputError(f"{where}: args must be a mapping, got {type(args).__name__}")
    _check_json(args, where, "args")
    return json.dumps(args, sort_keys=True, allow_nan=False)


def _check_json(value: Any, where: str, path: str) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InputError(f"{where}: {path} keys must be strings, got {k!r}")
            _check_json(v, where, f"{path}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _check_json(v, where, f"{path}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{where}: {path} must be a finite number, got {value}")
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise InputError(f"{where}: {path} must be a JSON value (number, string, boolean, list, mapping), "
                         f"got {type(value).__name__}")


def _count(value: Any, name: str, where: str) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {name} must be an integer >= 1, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number) or number != int(number) or number < 1:
        raise InputError(f"{where}: {name} must be an integer >= 1, got {value!r}")
    return int(number)


def _flag(value: Any, name: str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "1", "0"):
        return value.strip().lower() in ("true", "yes", "1")
    raise InputError(f"{where}: {name} must be true or false, got {value!r}")
