"""Entrypoints are checked by reading source, never by importing it: a package whose ``__init__`` (or module)
writes a file when imported is checked, accepted or refused, and the file never appears; only a ``def NAME(ctx)``
in Python source passes (no builtins, compiled functions, classes, lambdas, imported or assigned names)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hadar.errors import InputError
from hadar.job.entrypoint import check
from hadar.service.specs import parse_job_file

MARKER = "import pathlib\npathlib.Path({path!r}).write_text('imported')\n"

MODULE = '''
import functools
from os import path as joined

def train(ctx):
    pass

def with_defaults(ctx, lr=0.1, *, seed=0):
    pass

def anything(*args):
    pass

@functools.lru_cache
def decorated(ctx):
    pass

def two(ctx, other):
    pass

def keyword(ctx, *, lr):
    pass

def nothing():
    pass

async def later(ctx):
    pass

class Trainer:
    pass

short = lambda ctx: None
number = 3

if joined:
    def either(ctx):
        pass
else:
    either = None

try:
    def guarded(ctx):
        pass
except ImportError:
    def guarded(ctx):
        pass

value = 1
def value(ctx):  # the def rebinds it: that one counts
    pass
'''


def _package(root: Path, marker: Path) -> Path:
    """``root/mypkg/sub/mod.py``: every level writes ``marker`` (a different suffix each) when imported."""
    sub = root / "mypkg" / "sub"
    sub.mkdir(parents=True)
    (root / "mypkg" / "__init__.py").write_text(MARKER.format(path=str(marker) + ".pkg"))
    (sub / "__init__.py").write_text(MARKER.format(path=str(marker) + ".sub"))
    (sub / "mod.py").write_text(MARKER.format(path=str(marker) + ".mod") + MODULE)
    (root / "loose").mkdir()  # a namespace package (no __init__.py)
    (root / "loose" / "job.py").write_text(MARKER.format(path=str(marker) + ".loose") + MODULE)
    return root


def _imported(marker: Path) -> list[str]:
    return sorted(p.name for p in marker.parent.glob(marker.name + ".*"))


ACCEPTED = ["mypkg.sub.mod:train", "mypkg.sub.mod:with_defaults", "mypkg.sub.mod:anything",
            "mypkg.sub.mod:decorated", "mypkg.sub.mod:guarded", "mypkg.sub.mod:value", "loose.job:train"]
REFUSED = [
    ("mypkg.sub.mod:two", r"two\(\) in .*mod.py needs 2 arguments; .*def two\(ctx\)"),
    ("mypkg.sub.mod:keyword", r"needs keyword-only argument\(s\) lr"),
    ("mypkg.sub.mod:nothing", r"nothing\(\) in .*mod.py takes no argument"),
    ("mypkg.sub.mod:later", "is async"),
    ("mypkg.sub.mod:Trainer", r"Trainer in .*mod.py is a class; .*def Trainer\(ctx\)"),
    ("mypkg.sub.mod:short", r"short in .*mod.py is a lambda"),
    ("mypkg.sub.mod:number", r"number in .*mod.py is assigned \(line \d+\), not defined with def"),
    ("mypkg.sub.mod:either", r"either in .*mod.py is assigned"),  # one branch assigns None
    ("mypkg.sub.mod:joined", r"joined is imported in .*mod.py \(from os\), not defined there"),
    ("mypkg.sub.mod:missing", "no function 'missing' defined at the top level of .*mod.py"),
    ("mypkg.sub:train", r"no function 'train' defined at the top level of .*sub/__init__.py"),
    ("mypkg.sub.nope:train", "module mypkg.sub.nope not found"),
    ("mypkg.nope.mod:train", "no package mypkg.nope"),
    ("mypkg.sub.mod.deeper:train", "mypkg.sub.mod is a module, not a package"),
    ("loose:train", "loose is a namespace package"),
    ("os:system", r"no function 'system' defined at the top level of .*os.py \(a 'from ... import \*' there"),
    ("sys:exit", r"sys has no Python source to check \(built-in"),
    ("builtins:exec", "builtins has no Python source to check"),
    ("math:sqrt", r"math has no Python source to check \(.*\.so"),
    ("no_such_top_x.mod:train", "cannot find module no_such_top_x.mod"),
]


def test_checking_reads_source_and_imports_nothing(tmp_path):
    marker = tmp_path / "marker"
    root = _package(tmp_path / "src", marker)
    modules = set(sys.modules)
    for entry in ACCEPTED:
        assert str(check(entry, [str(root)])) == entry
    for entry, message in REFUSED:
        with pytest.raises(InputError, match=message) as e:
            check(entry, [str(root)])
        assert "\n" not in str(e.value)
    assert _imported(marker) == []
    assert not {m for m in set(sys.modules) - modules if m.startswith(("mypkg", "loose"))}


def test_a_submission_naming_a_package_never_imports_it(tmp_path):
    marker = tmp_path / "marker"
    root = _package(tmp_path / "src", marker)
    text = "jobs:\n  - {name: mine, entrypoint: 'mypkg.sub.mod:train', total_steps: 10}\n"
    (job,) = parse_job_file(text, "jobs.yaml", base_dir=str(root))
    assert job.train is not None and job.train.entrypoint == "mypkg.sub.mod:train"
    for bad in ("mypkg.sub.mod:Trainer", "os:system"):
        with pytest.raises(InputError, match=f"jobs.yaml: job 0: entrypoint '{bad}'"):
            parse_job_file(text.replace("mypkg.sub.mod:train", bad), "jobs.yaml", base_dir=str(root))
    assert _imported(marker) == []


def test_a_file_entrypoint_is_parsed_not_run(tmp_path):
    marker = tmp_path / "marker"
    (tmp_path / "train.py").write_text(MARKER.format(path=str(marker) + ".file") + MODULE)
    assert check("train.py:train", [str(tmp_path)]).path == str(tmp_path / "train.py")
    with pytest.raises(InputError, match="is a class"):
        check("train.py:Trainer", [str(tmp_path)])
    (tmp_path / "nul.py").write_bytes(b"def train(ctx):\n    pass\n\0\n")
    with pytest.raises(InputError, match=r"cannot parse .*nul\.py|syntax error in .*nul\.py"):
        check("nul.py:train", [str(tmp_path)])
    (tmp_path / "deep.py").write_text("x = " + "(" * 5000 + ")" * 5000 + "\ndef train(ctx):\n    pass\n")
    with pytest.raises(InputError, match=r"deep\.py"):
        check("deep.py:train", [str(tmp_path)])
    assert _imported(marker) == []
