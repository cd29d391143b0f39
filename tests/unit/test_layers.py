"""The layers point one way (docs/architecture.md): an import graph of src/hadar, read with ast.

    arrays, errors, clock, data        (no hadar imports)
    numeric, model                     <- the frozen values every layer shares
    config, sources                    <- inputs: cluster files, job sources
    job                                <- the train(ctx) API and the lease runner (no Ray)
    mechanism, solve                   <- ledger, planners, cadence; shared LPs
    policies, metrics                  <- pure decisions; summaries and limits of a run
    engine                             <- the one loop (policies, not metrics)
    build                              <- wires a run
    sim, runtime (library)             <- an executor and a clock each
    slurm                              <- an executor on Slurm (the runtime's bookkeeping, never Ray)
    cli, compare, report, runtime's    <- applications: may import anything
    entry points, anything not listed

Every import counts: at module level, inside functions (lazy imports), under TYPE_CHECKING, and
module names given to importlib as strings. A package below the application layer may import only
the packages ``ALLOWED`` lists for it (and itself); so nothing below may import an application
module, and a new package is an application until it is added here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
BASE = frozenset({"arrays", "errors", "files"})
#: package (first name under hadar) -> the packages its modules may import besides itself
ALLOWED: dict[str, frozenset[str]] = {
    "arrays": frozenset(),
    "errors": frozenset(),
    "files": frozenset({"errors"}),
    "clock": frozenset(),
    "data": frozenset(),
    "numeric": frozenset({"arrays"}),
    "model": BASE | {"data"},
    "config": BASE | {"model"},
    "sources": BASE | {"model"},
    # The job API (hadar.job): what user code imports, and the lease runner; below the runtime and the
    # trace reader (a job file's entrypoint fields), above nothing but the model.
    "job": BASE | {"model"},
    "mechanism": BASE | {"numeric", "model"},
    "solve": BASE | {"numeric", "model"},
    "policies": BASE | {"numeric", "model", "mechanism", "solve"},
    "metrics": BASE | {"numeric", "model", "mechanism", "solve"},
    "engine": BASE | {"clock", "model", "sources", "mechanism", "policies"},
    "build": BASE | {"clock", "model", "sources", "mechanism", "policies", "engine"},
    "sim": BASE | {"clock", "data", "numeric", "model", "sources", "job", "mechanism", "solve", "policies", "metrics",
                   "engine", "build"},
    # The runtime's library (executor, workers, run loop): like the simulator, and never the simulator.
    "runtime": BASE | {"clock", "data", "numeric", "model", "config", "sources", "job", "mechanism", "solve",
                       "policies", "metrics", "engine", "build"},
    # hadar on Slurm: an executor beside the runtime's, built on the runtime library's bookkeeping (progress,
    # checkpoints, measured rates, HadarE's copies; none of it imports Ray), never on the simulator.
    "slurm": BASE | {"clock", "data", "numeric", "model", "config", "sources", "job", "mechanism", "solve",
                     "policies", "metrics", "engine", "build", "runtime"},
}
#: Modules that are applications although their package is not (``hadar run``, ``hadar experiment``).
ENTRY_POINTS = frozenset({"hadar.runtime.cli", "hadar.runtime.experiment", "hadar.slurm.cli"})


def modules(src: Path = SRC) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the hadar package."""
    out = {}
    for path in sorted((src / "hadar").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imported(path: Path, known: set[str]) -> Iterator[str]:
    """Every hadar module or package ``path`` imports (any kind of import, and importlib strings)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == "hadar")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "hadar":
                yield node.module
        elif isinstance(node, ast.ImportFrom):
            raise AssertionError(f"{path}: relative import (the package uses absolute imports)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known:
            yield node.value


def package(module: str) -> str | None:
    """The layer of a module: its first name under hadar (None for ``hadar`` itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def violations(mods: dict[str, Path]) -> list[str]:
    known = set(mods)
    out = []
    for name, path in mods.items():
        pkg = package(name)
        if pkg is None or pkg not in ALLOWED or name in ENTRY_POINTS:
            continue  # an application (or the package's own __init__): may import anything
        for target in imported(path, known):
            tpkg = package(target)
            if tpkg is not None and tpkg != pkg and tpkg not in ALLOWED[pkg]:
                out.append(f"{name} imports {target}: {pkg} may import only {', '.join(sorted(ALLOWED[pkg]))}")
    return out


def test_every_layer_imports_only_what_is_below_it() -> None:
    bad = violations(modules())
    assert not bad, "imports against the layering (see this file's docstring):\n" + "\n".join(sorted(set(bad)))


def test_the_map_covers_the_library() -> None:
    mods = modules()
    packages = {package(m) for m in mods} - {None}
    assert {"model", "mechanism", "policies", "engine", "sim", "runtime", "slurm", "solve", "metrics"} <= packages
    assert set(mods) >= ENTRY_POINTS
    # nothing below the applications may import them, by construction of ALLOWED
    applications = packages - set(ALLOWED)
    assert {"cli", "cli_simulate", "compare", "report"} <= applications
    assert not any(applications & allowed for allowed in ALLOWED.values())


@pytest.mark.parametrize(("pkg", "forbidden"), [
    ("model", {"mechanism", "policies", "engine", "sim", "runtime", "metrics", "solve", "build"}),
    ("mechanism", {"policies", "engine", "sim", "runtime", "metrics", "build"}),
    ("policies", {"engine", "sim", "runtime", "metrics", "build"}),
    ("solve", {"mechanism", "policies", "engine", "sim", "runtime", "metrics"}),
    ("metrics", {"policies", "engine", "sim", "runtime", "build"}),
    ("engine", {"sim", "runtime", "metrics", "build"}),
    ("build", {"sim", "runtime", "metrics"}),
    ("sim", {"runtime"}),
    ("runtime", {"sim"}),
    ("job", {"mechanism", "policies", "engine", "build", "sim", "runtime"}),
])
def test_the_rules_of_issue_14(pkg: str, forbidden: set[str]) -> None:
    assert not forbidden & ALLOWED[pkg]


def test_a_backwards_import_is_caught(tmp_path: Path) -> None:
    (tmp_path / "hadar" / "model").mkdir(parents=True)
    (tmp_path / "hadar" / "engine.py").write_text("")
    (tmp_path / "hadar" / "model" / "__init__.py").write_text("")
    (tmp_path / "hadar" / "model" / "x.py").write_text("def f():\n    from hadar.engine import Engine\n")
    (tmp_path / "hadar" / "model" / "y.py").write_text("import importlib\nimportlib.import_module('hadar.engine')\n")
    bad = violations(modules(tmp_path))
    assert len(bad) == 2
    assert all(b.startswith("hadar.model.") and "imports hadar.engine" in b for b in bad)
