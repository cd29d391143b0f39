from __future__ import annotations

import itertools

import pytest

from hadar.errors import InputError
from hadar.sim.trace import read_jobs, read_trace, write_trace

LINE = "ResNet-50 (batch size 64)\tcmd\tdir\t--n\t1\t{steps}\t{sf}\t1\t-1.000000\t{arrival}\n"


@pytest.mark.parametrize(("name", "count", "sf_hist"), [
    ("max_min_fairness", 96, {1: 59, 2: 19, 4: 18}),
    ("minimize_makespan", 100, {1: 71, 2: 6, 4: 23}),
    ("small_test", 20, None),
    ("medium_test", 20, {1: 20}),
])
def test_bundled_traces_match_gavels_description(name, count, sf_hist):
    jobs = read_jobs(name)
    assert len(jobs) == count
    assert [j.job_id for j in jobs] == list(range(count))
    if sf_hist:
        hist: dict[int, int] = {}
        for j in jobs:
            hist[j.scale_factor] = hist.get(j.scale_factor, 0) + 1
        assert hist == sf_hist


def test_continuous_trace_spans_thirteen_hours():
    jobs = read_jobs("max_min_fairness")
    assert jobs[-1].arrival_s / 3600 == pytest.approx(12.9, abs=0.1)
    assert all(a.arrival_s <= b.arrival_s for a, b in itertools.pairwise(jobs))


@pytest.mark.parametrize(("text", "message"), [
    ("only\tthree\tfields\n", "t.trace:1: expected 10 tab-separated fields, got 3"),
    (LINE.format(steps="12x", sf=1, arrival=0), "t.trace:1: total_steps must be a number, got '12x'"),
    (LINE.format(steps=100, sf=-2, arrival=0), "t.trace:1: scale factor must be positive, got -2"),
    (LINE.format(steps=0, sf=1, arrival=0), "t.trace:1: total steps must be positive, got 0"),
    (LINE.format(steps=10, sf=1, arrival=50) + LINE.format(steps=10, sf=1, arrival=20),
     "t.trace:2: arrival time 20.0 is earlier than the previous line's 50.0"),
    (LINE.format(steps=10, sf=1.5, arrival=0), "t.trace:1: scale_factor must be an integer, got '1.5'"),
])
def test_malformed_lines_name_file_and_line(tmp_path, text, message):
    p = tmp_path / "t.trace"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        read_trace(p)
    assert str(e.value) == message


def test_truncated_last_line_is_reported(tmp_path):
    p = tmp_path / "t.trace"
    good = LINE.format(steps=10, sf=1, arrival=0)
    p.write_text(good + good.rsplit("\t", 3)[0])
    with pytest.raises(InputError, match=r"t.trace:2: expected 10 tab-separated fields, got 7"):
        read_trace(p)


def test_missing_file():
    with pytest.raises(InputError, match=r"trace file not found: /nonexistent\.trace"):
        read_jobs("/nonexistent.trace")


def test_round_trip(tmp_path):
    jobs = read_jobs("small_test")
    write_trace(jobs, tmp_path / "out.trace")
    again = read_trace(tmp_path / "out.trace")
    assert [(j.job_type, j.scale_factor, j.total_steps, j.arrival_s) for j in again] == \
        [(j.job_type, j.scale_factor, j.total_steps, j.arrival_s) for j in jobs]


def test_csv_and_yaml_job_lists_sorted_by_arrival(tmp_path):
    (tmp_path / "j.csv").write_text("job_type,scale_factor,total_steps,arrival_s\nA3C,1,100,50\nCycleGAN,1,200,0\n")
    jobs = read_jobs(tmp_path / "j.csv")
    assert [(j.job_id, j.job_type, j.arrival_s) for j in jobs] == [(0, "CycleGAN", 0.0), (1, "A3C", 50.0)]
    (tmp_path / "j.yaml").write_text("jobs:\n  - {job_type: A3C, total_steps: 10}\n"
                                     "  - {job_type: CycleGAN, total_steps: 5, scale_factor: 1, arrival_s: 3}\n")
    jobs = read_jobs(tmp_path / "j.yaml")
    assert [(j.job_type, j.total_steps, j.arrival_s) for j in jobs] == [("A3C", 10, 0.0), ("CycleGAN", 5, 3.0)]


def test_a_csv_line_short_of_cells_is_an_error_while_empty_cells_are_not(tmp_path):
    """A truncated CSV line must not run with its missing arrival read as 0; an empty optional cell is fine."""
    p = tmp_path / "j.csv"
    p.write_text("job_type,scale_factor,total_steps,arrival_s,priority_weight\nA3C,1,100,50,\nA3C,1,100\n")
    with pytest.raises(InputError) as e:
        read_jobs(p)
    assert str(e.value) == "j.csv:3: 3 cells where the header has 5 columns (a truncated line?)"
    p.write_text("job_type,scale_factor,total_steps,arrival_s,priority_weight\nA3C,1,100,50,\nA3C,1,100,,\n")
    assert [(j.arrival_s, j.priority_weight) for j in read_jobs(p)] == [(0.0, 1.0), (50.0, 1.0)]


@pytest.mark.parametrize(("content", "message"), [
    ("jobs:\n  - {job_type: A3C}\n", "missing total_steps"),
    ("jobs:\n  - {job_type: A3C, total_steps: 5, gpu: 2}\n", "unknown job field"),
    ("jobs:\n  - {job_type: A3C, total_steps: -5}\n", "total steps must be positive"),
    ("jobs: [\n", "not valid YAML"),
    ("- 3\n", "each job must be a mapping"),
])
def test_bad_yaml_job_lists(tmp_path, content, message):
    p = tmp_path / "j.yaml"
    p.write_text(content)
    with pytest.raises(InputError, match=message):
        read_jobs(p)
