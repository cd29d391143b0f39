"""Command line: ``hadar simulate | policies | ...``.

Every ``HadarError`` becomes one line on stderr and exit code 2. Other
subcommands live in their own modules and plug in through ``_SUBCOMMANDS``
(each module has ``add_parser(subparsers)`` and ``main(args) -> int``). Every
one of those modules is part of the core install and imports Ray and torch
only inside its commands, so ``hadar simulate`` and ``hadar --help`` work
without the runtime extra, and ``hadar run`` without it says what to install.
A subcommand module that fails to import is a bug and fails loudly.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib
import json
import logging
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from hadar.errors import HadarError

#: name -> module providing add_parser/main, imported only when needed.
_SUBCOMMANDS = {
    "simulate": "hadar.cli_simulate",
    "policies": "hadar.cli_simulate",
    "compare": "hadar.compare",
    "run": "hadar.runtime.cli",
    "experiment": "hadar.runtime.experiment",
    "report": "hadar.report",
    "trace": "hadar.cli_trace",
    "serve": "hadar.service.cli",
    "submit": "hadar.service.cli",
    "status": "hadar.service.cli",
    "cancel": "hadar.service.cli",
    "logs": "hadar.service.cli",
    "token": "hadar.service.cli",
    "usage": "hadar.service.cli",
    "replay": "hadar.cli_replay",
}


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # a value such as the cluster spec -1:2:3 reads as a value, as -1 does, so that its own check
        # names what is wrong with it (argparse took it for an option: "expected one argument")
        self._negative_number_matcher = re.compile(r"^-\d[\d.:,]*$")

    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse's own code)
        self.exit(2, f"hadar: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(prog="hadar", description="Heterogeneity-aware scheduling of deep-learning jobs "
                     "(Gavel, Hadar, HadarE): simulate policies on traces, or run real training on Ray.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    added: set[str] = set()
    for name, module in _SUBCOMMANDS.items():
        if only is not None and name != only:
            continue
        if module not in added:
            importlib.import_module(module).add_parser(sub)
            added.add(module)
    for command in sub.choices.values():
        _add_logging_args(command)
    return parser


def _add_logging_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("logging")
    g.add_argument("-v", "--verbose", action="count", default=0,
                   help="log what the scheduler decides on stderr (-v: info, -vv: debug)")
    g.add_argument("-q", "--quiet", action="store_true", help="errors only on stderr: no warnings, no progress")


def configure_logging(verbose: int = 0, quiet: bool = False) -> None:
    """Standard logging on stderr: warnings by default, info with -v, debug with -vv, errors with -q."""
    levels = {0: logging.WARNING, 1: logging.INFO}
    level = logging.ERROR if quiet else levels.get(verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr, force=True)


def show_progress(args: argparse.Namespace) -> bool:
    """Progress bars only on a terminal, and not with --quiet or --no-progress."""
    return not (getattr(args, "quiet", False) or getattr(args, "no_progress", False)) and sys.stderr.isatty()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    only = first if first in _SUBCOMMANDS else None
    parser = build_parser(only if only not in ("simulate", "policies") else None)
    try:
        if any(a == "--config" or a.startswith("--config=") for a in argv):  # the file's values, under the flags
            from hadar.runconfig import apply_config_file

            apply_config_file(parser, argv)
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            if not argv:  # no arguments at all: the default simulation
                args = parser.parse_args(["simulate"])
            else:
                parser.print_help()
                return 2
        configure_logging(getattr(args, "verbose", 0), getattr(args, "quiet", False))
        with native_stdout_on_stderr() if getattr(args, "json", False) else contextlib.nullcontext():
            return int(args.func(args) or 0)
    except HadarError as e:
        print(f"hadar: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("hadar: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


@contextlib.contextmanager
def native_stdout_on_stderr() -> Iterator[None]:
    """For ``--json``, whose stdout is exactly one JSON object: what native code writes to file
    descriptor 1 itself goes to stderr while the command runs, and Python's ``sys.stdout`` keeps the
    real stdout. The HiGHS that SciPy 1.17 bundles prints a line from its MIP solver with C's
    ``printf`` (Hadar's keeper solves MIPs) and no option of its turns that off. The command owns the
    process, so the redirection is made here, never in the library; C's buffered output is flushed
    (to stderr) before the descriptor is put back."""
    try:
        sys.stdout.flush()
        real = os.dup(1)
    except (OSError, ValueError):  # no stdout to keep clean
        yield
        return
    old = sys.stdout
    own = _fileno(old) == 1
    os.dup2(2, 1)
    if own:
        sys.stdout = open(real, "w", encoding=old.encoding, errors=old.errors, closefd=False,  # noqa: SIM115
                          buffering=1 if getattr(old, "line_buffering", False) else -1)
    try:
        yield
    finally:
        try:
            sys.stdout.flush()
        finally:
            _flush_c_stdio()
            if own:
                sys.stdout.close()
                sys.stdout = old
            os.dup2(real, 1)
            os.close(real)


def _fileno(stream: Any) -> int | None:
    try:
        return int(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None


def _flush_c_stdio() -> None:
    with contextlib.suppress(OSError, AttributeError, TypeError):  # no C library to reach (Windows)
        ctypes.CDLL(None).fflush(None)


def emit_json(obj: object) -> None:
    """Exactly one JSON object on stdout."""
    sys.stdout.write(json.dumps(obj, default=_json_default) + "\n")


def _json_default(o: object) -> object:
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):
        return o.item()  # numpy scalars
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


if __name__ == "__main__":
    raise SystemExit(main())
