"""Entrypoints: ``FILE.py:FUNCTION`` or ``package.module:FUNCTION``; checked without running them, loaded in a worker.

``check`` runs before a run starts, in the driver or the service's server: it finds the file or
module, parses its source (syntax errors) and looks for a top-level ``def FUNCTION(ctx)``, all
without executing any of the user's code: a dotted module is located on disk by the import
system's path finder, one package level at a time, so no package's ``__init__`` runs (a plain
``importlib.util.find_spec`` of a dotted name would import the parents). Only a function
defined with ``def`` in Python source and callable with one positional argument passes: a
builtin or compiled function (``os:system``), a class, a lambda, an imported or assigned name
are refused with a message saying why. ``load`` imports it for real, in the process that runs
a lease.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from typing import Any

from hadar.errors import InputError

#: One ``check`` at a time (the service checks submissions in a thread pool): on CPython 3.11
#: ``ast.parse`` in several threads at once can fail with "SystemError: AST constructor recursion
#: depth mismatch" (a shared counter; python/cpython#106905).
_CHECK_LOCK = threading.Lock()
_USE_DEF = "hadar calls it with the job's context: define it with def {name}(ctx)"
MAX_SOURCE_BYTES = 16 << 20  # an entrypoint's source file larger than this is refused


@dataclass(frozen=True, slots=True)
class Entrypoint:
    """A resolved entrypoint: ``path`` (absolute, for a file) or ``module``, and the function's name."""

    function: str
    path: str = ""
    module: str = ""

    def __str__(self) -> str:
        return f"{self.path or self.module}:{self.function}"


def parse(text: str, search_path: Sequence[str] = ()) -> Entrypoint:
    """Split and resolve ``text``: a ``.py`` file (relative: tried in each of ``search_path``) or a module."""
    target, _, function = text.strip().rpartition(":")
    if not target or not function.isidentifier():
        raise InputError(f"entrypoint {text!r}: want FILE.py:FUNCTION or package.module:FUNCTION")
    if target.endswith(".py") or "/" in target or os.sep in target:
        path = Path(target).expanduser()
        tries = [path] if path.is_absolute() else [Path(d) / path for d in search_path] or [path]
        found = next((p for p in tries if p.is_file()), None)
        if found is None:
            where = " or ".join(str(p.parent) for p in tries)
            raise InputError(f"entrypoint {text!r}: file {target} not found (looked in {where})")
        return Entrypoint(function, path=str(found.resolve()))
    if not all(part.isidentifier() for part in target.split(".")):
        raise InputError(f"entrypoint {text!r}: {target!r} is neither a .py file nor a dotted module name")
    return Entrypoint(function, module=target)


def check(text: str, search_path: Sequence[str] = ()) -> Entrypoint:
    """Resolve ``text`` and check, without running or importing any of it, that it defines ``def FUNCTION(ctx)``
    in Python source; ``InputError`` naming why not."""
    with _CHECK_LOCK:
        return _check(text, search_path)


def _check(text: str, search_path: Sequence[str]) -> Entrypoint:
    entry = parse(text, search_path)
    source_file = entry.path or _module_file(entry.module, entry.function, search_path, text)
    try:
        with open(source_file, "rb") as f:
            data = f.read(MAX_SOURCE_BYTES + 1)
    except OSError as e:
        raise InputError(f"entrypoint {text!r}: cannot read {source_file}: {e.strerror or e}") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise InputError(f"entrypoint {text!r}: {source_file} is larger than {MAX_SOURCE_BYTES} bytes")
    try:
        tree = ast.parse(data, filename=source_file)
    except SyntaxError as e:
        raise InputError(f"entrypoint {text!r}: syntax error in {source_file} line {e.lineno}: {e.msg}") from None
    except (ValueError, RecursionError, MemoryError) as e:  # NUL bytes (3.11), nesting too deep for the parser
        raise InputError(f"entrypoint {text!r}: cannot parse {source_file}: {type(e).__name__}: {e}") from None
    _check_function(tree, entry.function, text, source_file)
    return entry


def _module_file(module: str, function: str, search_path: Sequence[str], text: str) -> str:
    """The Python source file of ``module``, found as ``import`` would find it (``search_path``, then
    ``sys.path``), one package level at a time in the folders of the level above: nothing is imported."""
    parts = module.split(".")
    spec = _top_spec(parts[0], [*search_path, *sys.path], text)
    if spec is None:
        raise InputError(f"entrypoint {text!r}: cannot find module {module} (no {parts[0]!r} in "
                         f"{', '.join(search_path) or '.'} or the installed packages)")
    for depth in range(2, len(parts) + 1):
        locations = spec.submodule_search_locations
        if locations is None:
            raise InputError(f"entrypoint {text!r}: cannot find module {module}: {spec.name} is a module, "
                             "not a package")
        name = ".".join(parts[:depth])
        found = _find(name, list(locations), text)
        if found is None:
            missing = f"module {module} not found" if depth == len(parts) else f"no package {name}"
            raise InputError(f"entrypoint {text!r}: {missing} (looked in {', '.join(locations)})")
        spec = found
    origin = spec.origin or ""
    if origin.endswith(".py") and spec.has_location:
        return origin
    if not origin:
        raise InputError(f"entrypoint {text!r}: {module} is a namespace package (a folder without __init__.py); "
                         "name a module in it")
    raise InputError(f"entrypoint {text!r}: {module} has no Python source to check ({origin}: built in or "
                     f"compiled); {_USE_DEF.format(name=function)} in a .py file")


def _top_spec(name: str, path: list[str], text: str) -> ModuleSpec | None:
    """A top-level module's spec: on ``path`` first, then from the interpreter's other finders (built-in and
    frozen modules, installed import hooks); finding a top-level name imports nothing."""
    spec = _find(name, path, text)
    if spec is not None:
        return spec
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _find(fullname: str, path: list[str], text: str) -> ModuleSpec | None:
    try:
        return PathFinder.find_spec(fullname, path)
    except (ImportError, ValueError, OSError) as e:
        raise InputError(f"entrypoint {text!r}: cannot find module {fullname}: {type(e).__name__}: {e}") from None


def _check_function(tree: ast.Module, name: str, text: str, source_file: str) -> None:
    """Every top-level binding of ``name`` that may be the last one (``if`` branches, ``try`` blocks) must be
    ``def name(ctx)``."""
    bindings = _final_bindings(tree.body, name, [])
    if not bindings:
        star = any(isinstance(n, ast.ImportFrom) and n.names[0].name == "*" for n in ast.walk(tree))
        raise InputError(f"entrypoint {text!r}: no function {name!r} defined at the top level of {source_file}"
                         + (" (a 'from ... import *' there may bring it: name the module that defines it)"
                            if star else ""))
    for node in bindings:
        _check_binding(node, name, f"entrypoint {text!r}: {name}", source_file)


def _check_binding(node: ast.stmt, name: str, where: str, source_file: str) -> None:
    if isinstance(node, ast.FunctionDef):
        _check_parameters(node.args, f"{where}() in {source_file}", name)
    elif isinstance(node, ast.AsyncFunctionDef):
        raise InputError(f"{where} in {source_file} is async; it must be a plain function")
    elif isinstance(node, ast.ClassDef):
        raise InputError(f"{where} in {source_file} is a class; {_USE_DEF.format(name=name)}")
    elif isinstance(node, ast.Import | ast.ImportFrom):
        source = node.names[0].name if isinstance(node, ast.Import) else "." * node.level + (node.module or "")
        raise InputError(f"{where} is imported in {source_file} (from {source}), not defined there; name the "
                         "module that defines it")
    elif isinstance(getattr(node, "value", None), ast.Lambda):
        raise InputError(f"{where} in {source_file} is a lambda; {_USE_DEF.format(name=name)}")
    else:
        raise InputError(f"{where} in {source_file} is assigned (line {node.lineno}), not defined with def; "
                         f"{_USE_DEF.format(name=name)}")


def _check_parameters(a: ast.arguments, where: str, name: str) -> None:
    """Callable as ``name(ctx)``: one positional parameter (more with defaults, or ``*args``), no required
    keyword-only one."""
    positional = [*a.posonlyargs, *a.args]
    required = len(positional) - len(a.defaults)
    if not positional and a.vararg is None:
        raise InputError(f"{where} takes no argument; {_USE_DEF.format(name=name)}")
    if required > 1:
        raise InputError(f"{where} needs {required} arguments; {_USE_DEF.format(name=name)}")
    keywords = [k.arg for k, default in zip(a.kwonlyargs, a.kw_defaults, strict=True) if default is None]
    if keywords:
        raise InputError(f"{where} needs keyword-only argument(s) {', '.join(keywords)}; "
                         f"{_USE_DEF.format(name=name)}")


def _final_bindings(body: Sequence[ast.stmt], name: str, before: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that may have bound ``name`` last once ``body`` ran (``before``: those before it), in
    source order; the branches of ``if`` and ``try`` are all counted."""
    current = before
    for node in body:
        if isinstance(node, ast.If):
            current = _union(_final_bindings(node.body, name, current), _final_bindings(node.orelse, name, current))
        elif isinstance(node, ast.Try | ast.TryStar):
            ran = _final_bindings(node.orelse, name, _final_bindings(node.body, name, current))
            stopped = _union(current, _all_bindings(node.body, name))  # the body may stop anywhere
            for handler in node.handlers:
                ran = _union(ran, _final_bindings(handler.body, name, stopped))
            current = _final_bindings(node.finalbody, name, ran)
        elif isinstance(node, ast.With):
            current = _final_bindings(node.body, name, current)
        elif name in _bound_names(node):
            current = [node]
    return current


def _all_bindings(body: Sequence[ast.stmt], name: str) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If | ast.Try | ast.TryStar | ast.With):
            for field in ("body", "orelse", "finalbody"):
                out = _union(out, _all_bindings(getattr(node, field, []), name))
            for handler in getattr(node, "handlers", []):
                out = _union(out, _all_bindings(handler.body, name))
        elif name in _bound_names(node):
            out.append(node)
    return out


def _union(a: list[ast.stmt], b: list[ast.stmt]) -> list[ast.stmt]:
    return a + [n for n in b if n not in a]


def _bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        if isinstance(node, ast.AnnAssign) and node.value is None:
            return set()  # an annotation alone binds nothing
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
    return set()


_LOADED: dict[tuple[str, int], Any] = {}  # (file, mtime_ns) -> module: a worker imports each version once


def load(text: str, search_path: Sequence[str] = ()) -> Callable[..., Any]:
    """Import the entrypoint and return its function (runs the module's top-level code)."""
    entry = parse(text, search_path)
    if entry.path:
        module = _load_file(Path(entry.path))
    else:
        for folder in search_path:  # the job file's folder and the driver's current folder
            if folder not in sys.path:
                sys.path.append(folder)
        module = importlib.import_module(entry.module)
    fn = getattr(module, entry.function, None)
    if not callable(fn):
        raise InputError(f"entrypoint {text!r}: {entry.function!r} is not a function of {entry.path or entry.module}")
    return fn


def _load_file(path: Path) -> Any:
    key = (str(path), path.stat().st_mtime_ns)
    if key not in _LOADED:
        folder = str(path.parent)
        if folder not in sys.path:  # the script's siblings import as they would with `python FILE.py`
            sys.path.insert(0, folder)
        name = "hadar_user_" + hashlib.blake2b(key[0].encode(), digest_size=6).hexdigest()
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise InputError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        _LOADED[key] = module
    return _LOADED[key]
