"""No process-wide side effects in the library: no file descriptor redirected, no collector retuned, no
module-wide counter; and a ``--json`` command keeps its stdout one JSON object even when native code
prints (the command line owns the process, so that guard lives there)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hadar.policies.hadar.keeper import Work, horizon_s, round_plan

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "hadar"
#: the modules (under src/hadar) where a call may stay, and why: the command line owns its process
#: (``--json`` keeps stdout clean);
#: the command line owns the process: the one place a descriptor may be redirected (--json's stdout)
ALLOWED = {"os.dup2": {"cli.py"}, "gc.set_threshold": set()}
#: augmented assignments (``+=`` and the like) to an item of a module-level list or dict: a counter
COUNTER = "module-level counter"


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def _module_containers(tree: ast.Module) -> set[str]:
    """Names a module binds to a list, dict or set (a literal or a bare ``list()``-style call)."""
    out = set()
    for node in tree.body:
        value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        mutable = isinstance(value, ast.List | ast.Dict | ast.Set) or (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and value.func.id in ("list", "dict", "set", "defaultdict", "Counter"))
        out |= {t.id for t in targets if mutable and isinstance(t, ast.Name)}
    return out


def offences(path: Path, rel: str) -> list[str]:
    """What in one module is a process-wide side effect (``rel``: its path under ``src/hadar``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    containers = _module_containers(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            out.append(f"{rel}:{node.lineno} global {', '.join(node.names)}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            name = f"{node.value.id}.{node.attr}"
            if name in ALLOWED and rel not in ALLOWED[name]:
                out.append(f"{rel}:{node.lineno} {name}")
        elif (isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Subscript)
              and isinstance(node.target.value, ast.Name) and node.target.value.id in containers):
            out.append(f"{rel}:{node.lineno} {COUNTER} {node.target.value.id}")
    return out


def test_the_library_has_no_process_wide_side_effects() -> None:
    found = [o for p in _modules() for o in offences(p, p.relative_to(SRC).as_posix())]
    assert len(_modules()) > 50
    assert not found, "process-wide side effects in the library:\n" + "\n".join(found)


def test_the_check_finds_each_kind(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import gc, os\n_calls = [0]\n_seen: dict[str, int] = {}\n_n = 0\n\n\n"
                   "def f():\n    global _n\n    _n = 1\n    _calls[0] += 1\n    _seen['a'] += 1\n"
                   "    os.dup2(3, 1)\n    gc.set_threshold(10)\n")
    assert offences(bad, "sim/bad.py") == [
        "sim/bad.py:8 global _n", f"sim/bad.py:10 {COUNTER} _calls", f"sim/bad.py:11 {COUNTER} _seen",
        "sim/bad.py:12 os.dup2", "sim/bad.py:13 gc.set_threshold"]
    assert offences(bad, "cli.py") == [  # the command line may redirect a descriptor, nothing else
        "cli.py:8 global _n", f"cli.py:10 {COUNTER} _calls", f"cli.py:11 {COUNTER} _seen",
        "cli.py:13 gc.set_threshold"]
    fine = tmp_path / "fine.py"
    fine.write_text("_last = []\n\n\ndef f(x):\n    _last[:] = [x]\n    n = [0]\n    n[0] += 1\n")
    assert offences(fine, "fine.py") == []  # a one-entry cache replaced whole; a local counter


def test_the_keepers_mip_prints_nothing(capfd: pytest.CaptureFixture[str]) -> None:
    """Hadar's whole-gang MIP (HiGHS through SciPy's ``milp``, ``disp`` off) writes nothing to file
    descriptor 1 or 2 while it solves: HiGHS's log is off, no descriptor is redirected."""
    rng = np.random.default_rng(3)
    m, n = 12, 3
    w = Work(rng.uniform(0.5, 5.0, (m, n)), rng.uniform(2e3, 2e4, m), rng.choice([1, 2], m).astype(float),
             np.array([4.0, 4.0, 4.0]))
    capfd.readouterr()
    got = round_plan(w, rng.uniform(0.0, 1.0, (m, n)), 360.0, horizon_s(w) - 360.0, whole=True)
    assert got is not None and np.allclose(got[0], np.round(got[0])) and got[0].sum() > 0
    assert capfd.readouterr() == ("", "")


NOISY = """
import ctypes, os, sys
import hadar.sim.run as run
real = run.simulate
def noisy(*a, **k):
    ctypes.CDLL(None).printf(b"a native line, buffered by C\\n")  # as HiGHS's MIP solver prints
    os.write(1, b"a line written to descriptor 1\\n")
    return real(*a, **k)
run.simulate = noisy
from hadar.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("unbuffered", [False, True])
def test_json_stdout_stays_one_object_when_native_code_prints(unbuffered: bool) -> None:
    """Through a pipe (C's stdout then fully buffered, unless Python runs unbuffered), what native code
    writes to descriptor 1 during ``hadar simulate --json`` reaches stderr, never stdout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    done = subprocess.run([sys.executable, "-c", NOISY, "simulate", "--json", "--no-progress", "-q", "--generate",
                           "--num-jobs", "3", "--jobs-per-hour", "2", "--policy", "hadar"],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["policy"] == "hadar" and summary["jobs_completed"] == 3
    assert sorted(done.stderr.splitlines()) == ["a line written to descriptor 1", "a native line, buffered by C"]


def test_json_guard_in_process_keeps_python_output_and_moves_descriptor_writes(
        capfd: pytest.CaptureFixture[str]) -> None:
    from hadar.cli import native_stdout_on_stderr

    with native_stdout_on_stderr():
        print("python's own output")
        os.write(1, b"written to descriptor 1\n")
    os.write(1, b"after\n")
    out, err = capfd.readouterr()
    assert out == "python's own output\nafter\n"
    assert err == "written to descriptor 1\n"
