"""The same inputs give the same schedule on any CPU: every BLAS kernel, NumPy dispatch, hash seed.

``determinism_cases.py`` runs the Gavel reference rows (Gavel-compatible mode) and every
registered policy in default mode, and prints each run's summary and a hash of its whole
schedule. Here it runs in subprocesses under every OpenBLAS kernel this CPU can execute
(OpenBLAS picks its kernel at load time from ``OPENBLAS_CORETYPE``; a machine with another CPU
gets another kernel by default, which is how a result can change from one machine to the
next), with NumPy's AVX-512 and AVX2 loops switched off, and under other hash seeds. Every
subprocess must print the same bytes for the cases it shares with the first.

The first environment (the oldest kernel) runs every case. Each other environment runs the cover
set (every policy once, on the smallest workload, in default and Gavel-compatible mode) and its
share of the rest, dealt out in turn: every policy runs under every kernel, dispatch setting and
hash seed, and every case under the first environment and one other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.integration import determinism_cases

SCRIPT = Path(__file__).with_name("determinism_cases.py")
NUMPY_AVX512 = "AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR"


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def kernels() -> list[str]:
    """OpenBLAS x86-64 kernels from oldest to newest, those this CPU can run (Prescott runs anywhere)."""
    flags = _cpu_flags()
    out = ["Prescott"]
    for kernel, needs in (("Nehalem", "sse4_2"), ("Sandybridge", "avx"), ("Haswell", "avx2"), ("SkylakeX", "avx512f")):
        if needs in flags:
            out.append(kernel)
    return out


def environments() -> dict[str, dict[str, str]]:
    envs = {f"openblas={k}": {"OPENBLAS_CORETYPE": k} for k in kernels()}
    envs["numpy-without-avx512"] = {"NPY_DISABLE_CPU_FEATURES": NUMPY_AVX512}
    if "avx2" in _cpu_flags():
        envs["numpy-without-avx2"] = {"NPY_DISABLE_CPU_FEATURES": NUMPY_AVX512 + " AVX2 FMA3"}
    envs["hashseed=1"] = {"PYTHONHASHSEED": "1"}
    envs["hashseed=2"] = {"PYTHONHASHSEED": "2"}
    return envs


def assignment(envs: list[str]) -> dict[str, list[str]]:
    """Environment -> the cases it runs: the first all of them, every other the cover set and, dealt out in
    turn, its share of the rest."""
    every = [determinism_cases.name(*c) for c in determinism_cases.cases()]
    cover = determinism_cases.cover()
    rest = [n for n in every if n not in cover]
    others = envs[1:]
    return {envs[0]: every} | {e: cover + rest[i::len(others)] for i, e in enumerate(others)}


def _run(extra: dict[str, str], names: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")}
    env.update({"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}, **extra)
    proc = subprocess.run([sys.executable, str(SCRIPT), *names], env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, f"{extra}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_every_policy_runs_under_every_environment_and_every_case_under_two():
    envs = list(environments())
    runs = assignment(envs)
    every = set(runs[envs[0]])
    assert len(every) >= 70, "fewer cases than expected"
    policies = {determinism_cases.name(*c): c[3] for c in determinism_cases.cases()}
    for e in envs[1:]:
        assert {policies[n] for n in runs[e]} == set(policies.values()), e
    shared = [n for e in envs[1:] for n in runs[e]]
    assert set(shared) == every


def test_same_schedule_under_every_kernel_dispatch_and_hash_seed():
    envs = environments()
    assert len(envs) >= 5, envs
    runs = assignment(list(envs))
    with ThreadPoolExecutor(max_workers=2) as pool:
        texts = pool.map(_run, envs.values(), (runs[e] for e in envs))
        outputs = dict(zip(envs, texts, strict=True))
    reference_name = next(iter(outputs))
    reference = json.loads(outputs[reference_name])
    assert sorted(reference) == sorted(runs[reference_name])
    for name, text in outputs.items():
        got = json.loads(text)
        assert sorted(got) == sorted(runs[name]), name
        differ = sorted(k for k in got if got[k] != reference[k])
        assert not differ, f"{name} differs from {reference_name} on {len(differ)} case(s): {differ[:5]}"
