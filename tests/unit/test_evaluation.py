"""The evaluation sets (hadar.evaluation, docs/evaluation.md) and bench/bench_heldout.py.

The dev and held-out sets are disjoint from each other and, by the module's stated rule, from every
workload the docs, tests and benches use: no shared day of Philly's table, no shared seed; the
dates and seeds those files name are the ones the rule excludes. The bench runs on a tiny set (a
synthetic Philly table and a few generated jobs) in seconds.
"""

from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path

import pytest

from hadar import evaluation as ev
from hadar.errors import InputError
from tests.helpers import load_bench

ROOT = Path(__file__).resolve().parents[2]
#: the files that name the evaluation's own dates and seeds (everything else must avoid them)
OWN = {"docs/evaluation.md", "tests/unit/test_evaluation.py", "bench/bench_heldout.py"}
MONTHS = {"sep": 9, "oct": 10, "nov": 11, "dec": 12}


def project_files() -> list[Path]:
    out = [ROOT / "README.md"]
    for top in ("docs", "tests", "bench", "examples"):
        out += [p for p in sorted((ROOT / top).rglob("*")) if p.suffix in (".md", ".py", ".yaml", ".sh", ".csv")]
    return [p for p in out if p.is_file() and p.relative_to(ROOT).as_posix() not in OWN]


def named_dates(text: str) -> set[date]:
    """Dates of Philly's period a text names: 2017-10-16, oct16, or a virtual cluster's `6214e9 11-20`."""
    out = {date(int(y), int(m), int(d)) for y, m, d in re.findall(r"\b(201[78])-(\d\d)-(\d\d)\b", text)}
    out |= {date(2017, MONTHS[m], int(d)) for m, d in re.findall(r"\b(sep|oct|nov|dec)(\d\d)\b", text, re.I)
            if m.lower() in MONTHS}
    out |= {date(2017, int(m), int(d)) for m, d in re.findall(r"\b[0-9a-f]{6} (09|1[0-2])-([0-3]\d)\b", text)}
    return out


def named_seeds(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"\bseeds?(?:=| |: ?|\()(\d+)\b", text, re.I)}


#: the held-out set as first reported (docs/evaluation.md): it must never move
HELDOUT = (("6214e9", "2017-10-21", "8:16:24", 4, 201), ("11cb48", "2017-10-12", "8:16:24", 1, 202),
           ("6c71a0", "2017-12-03", "8:16:24", 8, 203), ("b436b2", "2017-10-12", "16:16:16", 1, 204),
           ("ee9e8c", "2017-11-02", "4:8:12", 1, 205), ("0e4a51", "2017-11-11", "8:16:24", 8, 206),
           ("ed69ec", "2017-11-11", "16:16:16", 1, 207), ("2869ce", "2017-11-04", "8:16:24", 4, 208),
           (2.0, "", "4:8:12", 4, 209), (6.0, "", "8:16:24", 8, 210), (12.0, "", "12:12:12", 4, 211))


def test_the_heldout_set_is_the_one_first_reported_and_reads_nothing_of_the_dev_set(
        monkeypatch: pytest.MonkeyPatch) -> None:
    held = ev.heldout_set()
    assert [(w.vc or w.jobs_per_hour, w.start, w.cluster, w.gpus_per_node, w.seed) for w in held] == list(HELDOUT)
    assert [w.name for w in held][:3] == ["6214e9 10-21 8:16:24 4/node", "11cb48 10-12 8:16:24",
                                         "6c71a0 12-03 8:16:24 8/node"]
    assert [w.jobs for w in held] == [60, 60, 60, 60, 40, 40, 40, 20, 40, 40, 40]

    def no_dev() -> None:
        raise AssertionError("the held-out draw read the dev set")
    monkeypatch.setattr(ev, "dev_set", no_dev)
    assert ev.heldout_set() == held


def test_the_sets_are_fixed_and_of_the_stated_shape() -> None:
    dev, held = ev.dev_set(), ev.heldout_set()
    assert ev.dev_set() == dev and ev.heldout_set() == held  # drawn from stated seeds, nothing else
    n = len(ev.VIRTUAL_CLUSTERS)
    assert len(dev) == ev.DEV_PHILLY + len(ev.DEV_LOADS) + n + len(ev.CROWDED_LOADS) == 16
    assert len(held) == n + len(ev.HELDOUT_LOADS) == 11
    assert [w.vc for w in held if w.philly] == list(ev.VIRTUAL_CLUSTERS)  # every virtual cluster once
    assert len({w.vc for w in dev[:ev.DEV_PHILLY]}) == ev.DEV_PHILLY
    crowded = dev[ev.DEV_PHILLY + len(ev.DEV_LOADS):]
    assert [w.vc for w in crowded if w.philly] == list(ev.VIRTUAL_CLUSTERS)  # the crowded part: every one
    assert [w.jobs_per_hour for w in crowded if not w.philly] == list(ev.CROWDED_LOADS)
    assert all((w.cluster, w.gpus_per_node) in ev.CROWDED_CLUSTERS for w in crowded)
    assert {c for c, _ in ev.CROWDED_CLUSTERS} == {"4:8:12", "8:16:24"}
    first = set().union(*(w.days() for w in dev[:ev.DEV_PHILLY]))
    assert first == ev.HELDOUT_AVOIDS  # the first four windows as first drawn: the days the held-out set avoids
    assert [w.name for w in dev[:6]] == ["6c71a0 11-24 12:12:12", "b436b2 11-26 16:16:16 4/node",
                                         "ed69ec 10-27 16:16:16 4/node", "11cb48 10-27 4:8:12 4/node",
                                         "gen 3/h 16:16:16", "gen 9/h 8:16:24 8/node"]
    assert not any(w.days() & first for w in crowded)
    assert [w.seed for w in dev] == [*range(101, 105), 109, 110, *range(111, 121)]
    assert sorted(w.jobs_per_hour for w in held if not w.philly) == sorted(ev.HELDOUT_LOADS)
    for w in (*dev, *held):
        assert (w.cluster, w.gpus_per_node) in ev.CLUSTERS
        assert w.jobs == (ev.window_jobs(w.vc) if w.philly else ev.GENERATED_JOBS)
    assert len({w.name for w in (*dev, *held)}) == len(dev) + len(held)
    assert ev.workloads("dev") == dev and ev.workloads("heldout") == held
    with pytest.raises(InputError, match="unknown evaluation set 'test'"):
        ev.workloads("test")


def test_dev_and_heldout_share_no_day_date_or_seed() -> None:
    dev, held = ev.dev_set(), ev.heldout_set()
    held_days = set().union(*(w.days() for w in held))
    assert not held_days & ev.HELDOUT_AVOIDS
    for w in dev:
        assert not w.days() & held_days, w.name  # no Philly job is in both sets
    assert not {w.start for w in held if w.philly} & {w.start for w in dev if w.philly}
    assert not {w.seed for w in dev} & {w.seed for w in held}
    assert all(ev.DEV_SEED < w.seed < ev.HELDOUT_SEED for w in dev)
    assert all(w.seed > ev.HELDOUT_SEED for w in held)


def test_no_window_touches_a_day_used_elsewhere() -> None:
    first, last = ev.CALENDAR
    for w in (*ev.dev_set(), *ev.heldout_set()):
        days = w.days()
        assert len(days) == (ev.SPAN_DAYS if w.philly else 0)
        assert all(first <= d <= last for d in days), w.name
        assert not days & ev.USED_DAYS, w.name
        assert w.seed >= ev.USED_SEEDS_BELOW and w.seed != 0


def test_the_dates_and_seeds_used_elsewhere_are_the_ones_excluded() -> None:
    dates: dict[date, str] = {}
    seeds: dict[int, str] = {}
    for p in project_files():
        text = p.read_text(errors="replace")
        dates.update(dict.fromkeys(named_dates(text), p.name))
        seeds.update(dict.fromkeys(named_seeds(text), p.name))
    assert date(2017, 10, 16) in dates and date(2017, 11, 20) in dates  # the scan sees the docs' windows
    own = set().union(*(w.days() for w in (*ev.dev_set(), *ev.heldout_set())))  # docs may name the sets' windows
    stray = {d: f for d, f in dates.items() if d not in ev.USED_DAYS | own}
    assert not stray, f"dates named outside the evaluation and not excluded by hadar.evaluation: {stray}"
    big = {s: f for s, f in seeds.items() if s >= ev.USED_SEEDS_BELOW}
    assert not big, f"seeds of {ev.USED_SEEDS_BELOW} or more used outside the evaluation: {big}"
    assert ev.USED_DATES <= ev.USED_DAYS


def test_used_philly_lists_every_benchs_philly_workload() -> None:
    real, packing = load_bench("bench_real_traces"), load_bench("bench_packing")
    listed = set(ev.USED_PHILLY)
    for _, vc, start, jobs, _, _ in real.WORKLOADS:
        assert (vc, start, jobs, 0) in listed
    for _, vc, start, _, _, _ in real.WINDOWS:
        assert (vc, start, 0, real.WINDOW_DAYS) in listed
    for _, src, _ in packing.WORKLOADS:
        if not isinstance(src, str):
            assert (*src, 0) in listed
    assert len(listed) == len(real.WORKLOADS) + len(real.WINDOWS)
    assert {date.fromisoformat(s) for _, s, _, _ in ev.USED_PHILLY} <= ev.USED_DATES


def test_free_starts_leave_room_for_a_whole_window() -> None:
    starts = ev.free_starts()
    assert starts and date(2017, 10, 12) in starts and date(2017, 10, 13) not in starts  # 10-15 is used
    taken = frozenset({date(2017, 10, 21)})
    assert date(2017, 10, 19) not in ev.free_starts(taken) and date(2017, 10, 22) in ev.free_starts(taken)


def test_a_workload_names_its_commands() -> None:
    w = ev.Workload("x", "4:8:12", 4, 205, vc="ee9e8c", start="2017-11-02", jobs=40)
    assert w.command().startswith("hadar trace import philly philly.csv --vc ee9e8c --start 2017-11-02 --days 3 "
                                  "--seed 205 --out all.csv && head -n 41 all.csv > w.csv && hadar compare --trace "
                                  "w.csv --cluster 4:8:12 --gpus-per-node 4 --policies")
    g = ev.Workload("g", "8:16:24", 1, 209, jobs=40, jobs_per_hour=2.0)
    assert g.compare_argv() == ["--generate", "--multi-gpu", "--jobs-per-hour", "2", "--num-jobs", "40", "--seed",
                                "209", "--cluster", "8:16:24", "--gpus-per-node", "1"]
    with pytest.raises(InputError, match="needs its imported trace"):
        w.compare_argv()


# -- the bench on a tiny set -------------------------------------------------------
PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-16 01:00:00,900.0,1,900.0,6214e9
2017-10-05 09:00:00,1200.0,1,1200.0,aaaaaa
2017-10-05 09:10:00,600.0,2,1200.0,aaaaaa
2017-10-05 10:00:00,1800.0,1,1800.0,aaaaaa
2017-10-09 10:00:00,1800.0,1,1800.0,aaaaaa
"""
TINY = (ev.Workload("tiny window", "1:1:2", 1, 201, vc="aaaaaa", start="2017-10-05", jobs=3),
        ev.Workload("tiny gen", "2:2:2", 1, 209, jobs=3, jobs_per_hour=6.0))


@pytest.fixture
def philly(tmp_path: Path) -> Path:
    p = tmp_path / "philly.csv"
    p.write_text(PHILLY)
    return p


def test_the_bench_runs_a_tiny_set_and_writes_json_and_csv(philly: Path, tmp_path: Path) -> None:
    bench = load_bench("bench_heldout")
    measured = bench.run_set("tiny", TINY, philly)
    assert measured["tiny window"]["jobs"] == 3  # the window's cap: the 09:00-10:00 jobs, not 10-09's
    assert measured["tiny gen"]["jobs"] == 3
    for m in measured.values():
        rows = m["results"]
        assert list(rows) == ["hadar", "max_min_fairness_perf", "hadare", "hadare-calibrated"]
        assert rows["max_min_fairness_perf"]["jct_vs_baseline"] == pytest.approx(1.0)
        assert all(r["ftf_max"] > 0 and r["jobs_completed"] == 3 for r in rows.values())
        assert m["goals"] == bench.goals(rows) and set(m["goals"]) == set(bench.GOALS)
    text = bench.summary("tiny", measured)
    assert text.splitlines()[0] == "tiny set, 2 workloads: goals held" and "jct" in text
    js, cv = bench.write(tmp_path / "out", "tiny", TINY, measured, {"wall_s": 1.0})
    doc = json.loads(js.read_text())
    assert [w["workload"]["name"] for w in doc["workloads"]] == ["tiny window", "tiny gen"]
    assert doc["workloads"][0]["command"] == TINY[0].command()
    assert len(cv.read_text().splitlines()) == 1 + 2 * 4
    md = bench.markdown(doc).splitlines()
    assert md[2].startswith("| tiny window (3 jobs, LAS stretch ") and md[3].startswith("|  | LAS | ")
    assert md[-1] == "| **held on** | " + " | ".join(
        f"{sum(m['goals'][g] for m in measured.values())} of 2" for g in bench.GOALS) + " |"


def test_the_bench_finds_a_window_sharing_jobs_with_a_used_workload(philly: Path) -> None:
    bench = load_bench("bench_heldout")
    assert bench.shared_jobs(philly, TINY) == []
    clash = ev.Workload("clash", "1:1:1", 1, 201, vc="6214e9", start="2017-10-15", jobs=5)
    assert bench.shared_jobs(philly, (clash,)) == ["clash: 1 job(s) of a Philly workload used elsewhere"]


def test_the_bench_refuses_a_name_not_in_the_set(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_bench("bench_heldout")
    assert bench.main(["--set", "dev", "--only", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench_heldout: error: no workload 'nope' in the dev set (its names: 6c71a0 11-24")
    assert len(err.splitlines()) == 1


def row(avg: float, p99: float, ttd: float, ftf: float, stretch: float = 1.0) -> dict[str, float]:
    return {"avg_jct_s": avg, "p99_jct_s": p99, "makespan_s": ttd, "ftf_max": ftf, "stretch": stretch}


@pytest.mark.parametrize(("hadar", "las", "cal", "missed"), [
    (row(100, 100, 10, 1.0), row(100, 100, 10, 1.0), row(100, 100, 10, 1.0), set()),  # equal passes
    (row(101, 100, 10, 1.0), row(100, 100, 10, 1.0), row(90, 90, 10, 1.0), {"jct"}),
    (row(98, 100, 10, 1.0), row(100, 100, 10, 1.0, stretch=1.2), row(90, 90, 10, 1.0), {"jct"}),  # 0.97x needed
    (row(97, 100, 10, 1.0), row(100, 100, 10, 1.0, stretch=1.2), row(90, 90, 10, 1.0), set()),
    (row(90, 106, 10, 1.0), row(100, 100, 10, 1.0), row(90, 90, 10, 1.0), {"p99"}),
    (row(90, 100, 10, 2.0), row(100, 100, 10, 1.0), row(90, 90, 10, 1.0), set()),  # FTF 2 always passes
    (row(90, 100, 10, 2.4), row(100, 100, 10, 2.2), row(90, 90, 10, 1.0), {"ftf"}),
    (row(90, 100, 10, 1.0), row(100, 100, 10, 1.0), row(89, 90, 11, 1.0), {"calibrated"}),  # TTD longer
])
def test_the_goals(hadar: dict, las: dict, cal: dict, missed: set[str]) -> None:
    bench = load_bench("bench_heldout")
    ok = bench.goals({"hadar": hadar, "max_min_fairness_perf": las, "hadare-calibrated": cal})
    assert {g for g, held in ok.items() if not held} == missed
