"""Code shape (DESIGN.md's style, issue 14): no module over 400 lines, no function over 60, and
no function in ``src/`` over 8 parameters.

A function's length is counted in physical lines, from its first decorator (or ``def``) to its
last line, docstring and comments included; a nested function counts on its own and within the
function around it. Checked over the package, the tests and the benchmarks. Parameters are
counted over the package only: positional and keyword ones, ``self`` and ``cls`` left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCOPE = ("src/hadar", "tests", "bench")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 8


def python_files(root: Path = ROOT) -> list[Path]:
    out = []
    for top in SCOPE:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if "__pycache__" not in rel:
                out.append(path)
    return out


def module_too_long(path: Path, limit: int = MAX_MODULE_LINES) -> str | None:
    lines = len(path.read_text().splitlines())
    return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {lines} lines" if lines > limit else None


def functions_too_long(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - first + 1
            if length > limit:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                out.append(f"{where}:{node.lineno} {node.name}() is {length} lines")
    return out


def too_many_parameters(path: Path, limit: int = MAX_PARAMETERS) -> dict[str, int]:
    """``path:name`` -> parameter count of each function in ``path`` over ``limit`` (self and cls left out)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    where = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.as_posix()
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg not in ("self", "cls")]
            if len(names) > limit:
                out[f"{where}:{node.name}"] = len(names)
    return out


def test_scope_is_not_empty() -> None:
    files = python_files()
    assert len(files) > 50
    assert any(p.name == "engine.py" for p in files)
    assert any(p.name == "executor.py" and p.parent.name == "runtime" for p in files)


def test_no_module_over_400_lines() -> None:
    bad = [v for p in python_files() if (v := module_too_long(p))]
    assert not bad, "modules over 400 lines (split them):\n" + "\n".join(bad)


def test_no_function_over_60_lines() -> None:
    bad = [v for p in python_files() for v in functions_too_long(p)]
    assert not bad, "functions over 60 lines (split them):\n" + "\n".join(bad)


def test_no_function_in_src_over_8_parameters() -> None:
    over: dict[str, int] = {}
    for path in python_files():
        if path.relative_to(ROOT).parts[0] == "src":
            over.update(too_many_parameters(path))
    bad = sorted(f"{k} takes {v}" for k, v in over.items())
    assert not bad, "functions over 8 parameters (group them in a frozen dataclass):\n" + "\n".join(bad)


def test_the_parameter_check(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("class C:\n    def f(self, a, b, c, d, e, f, g, h): ...\n"
                    "def g(a, b, c, d, *, e, f, g, h, i): ...\n")
    assert too_many_parameters(path) == {f"{path.as_posix()}:g": 9}


@pytest.mark.parametrize(("body_lines", "flagged"), [(58, False), (59, True)])
def test_the_function_check_counts_def_and_decorators(tmp_path: Path, body_lines: int, flagged: bool) -> None:
    # decorator + def + body = body_lines + 2 lines
    src = "@staticmethod\ndef f():\n" + "    x = 1\n" * body_lines
    path = tmp_path / "m.py"
    path.write_text(src)
    assert bool(functions_too_long(path)) is flagged


def test_the_module_check(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("x = 1\n" * 400)
    assert module_too_long(path) is None
    path.write_text("x = 1\n" * 401)
    assert module_too_long(path) is not None
