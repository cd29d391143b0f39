"""bench/bench_scale.py refuses a bad command line with one line on stderr and exit code 2, before any case runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_scale.py"


@pytest.mark.parametrize(("args", "says"), [
    (["--workloads", "generated,fake"], "unknown workload 'fake'"),
    (["--sizes", "1000,-5"], "--sizes must be positive whole job counts"),
    (["--sizes", "10", "--workloads", "philly", "--philly", "/no/such/philly.csv"],
     "Philly's job table not found at /no/such/philly.csv"),
])
def test_a_bad_command_line_gets_one_line_and_exit_code_2(args: list[str], says: str) -> None:
    done = subprocess.run([sys.executable, str(BENCH), *args], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and says in done.stderr
