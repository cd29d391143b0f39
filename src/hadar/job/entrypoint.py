"""Entrypoints: ``FILE.py:FUNCTION`` or ``package.module:FUNCTION``; checked without running them, loaded in a worker.

``check`` runs before a run starts, in the driver: it finds the file or module, compiles
the source (syntax errors) and looks for a top-level ``FUNCTION`` taking an argument, all
without executing the user's code (a dotted module's parent packages are imported to find
it). ``load`` imports it for real, in the process that runs a lease.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hadar.errors import InputError

#: One ``check`` at a time (the service checks submissions in a thread pool): it puts folders on
#: ``sys.path`` for a moment, and on CPython 3.11 ``ast.parse`` in several threads at once can fail with
#: "SystemError: AST constructor recursion depth mismatch" (a shared counter; python/cpython#106905).
_CHECK_LOCK = threading.Lock()


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
    """Resolve ``text`` and check, without running it, that it defines ``FUNCTION(ctx)``; ``InputError`` if not."""
    with _CHECK_LOCK:
        return _check(text, search_path)


def _check(text: str, search_path: Sequence[str]) -> Entrypoint:
    entry = parse(text, search_path)
    source_file = entry.path or _module_file(entry.module, search_path, text)
    if source_file is None:  # a compiled or namespace module: nothing to read
        return entry
    try:
        source = Path(source_file).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"entrypoint {text!r}: cannot read {source_file}: {e}") from None
    try:
        tree = ast.parse(source, filename=source_file)
    except SyntaxError as e:
        raise InputError(f"entrypoint {text!r}: syntax error in {source_file} line {e.lineno}: {e.msg}") from None
    _check_function(tree, entry.function, text, source_file)
    return entry


def _module_file(module: str, search_path: Sequence[str], text: str) -> str | None:
    with _on_path(search_path):
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError) as e:  # a parent package is missing or broken
            raise InputError(f"entrypoint {text!r}: cannot find module {module}: {type(e).__name__}: {e}") from None
        except Exception as e:
            raise InputError(f"entrypoint {text!r}: importing the packages of {module} failed: "
                             f"{type(e).__name__}: {e}") from None
    if spec is None:
        raise InputError(f"entrypoint {text!r}: module {module} not found (looked in {', '.join(search_path) or '.'} "
                         "and the installed packages)")
    origin = spec.origin
    return origin if origin and origin.endswith(".py") else None


def _check_function(tree: ast.Module, name: str, text: str, source_file: str) -> None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            a = node.args
            if not (a.posonlyargs or a.args or a.vararg):
                raise InputError(f"entrypoint {text!r}: {name}() in {source_file} takes no argument; "
                                 "it must take the job's context: def {name}(ctx)")
            return
        if isinstance(node, ast.AsyncFunctionDef) and node.name == name:
            raise InputError(f"entrypoint {text!r}: {name} in {source_file} is async; it must be a plain function")
        if name in _bound_names(node):
            return  # assigned or imported at top level: trust it
    raise InputError(f"entrypoint {text!r}: no function {name!r} defined at the top level of {source_file}")


def _bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if isinstance(node, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, ast.If | ast.Try):
        return {n for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt) for n in _bound_names(child)}
    return set()


@contextmanager
def _on_path(folders: Sequence[str]) -> Iterator[None]:
    added = [f for f in folders if f not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for f in added:
            if f in sys.path:
                sys.path.remove(f)


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
