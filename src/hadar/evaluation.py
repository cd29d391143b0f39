"""The evaluation sets (docs/evaluation.md): a dev set to choose defaults on, a held-out set to report.

Both sets are drawn here, by the rules below, from seeds this module states; nothing in them was
picked by looking at a result. A set is Philly windows plus generated workloads:

- **Philly windows.** Jobs of one virtual cluster of Microsoft's Philly job table, imported with
  ``hadar trace import philly``'s rules (docs/traces.md): from a start date (midnight), the jobs
  submitted within ``SPAN_DAYS`` days, at most ``window_jobs(vc)`` of them (the first ones), job
  types assigned with the window's own ``--seed``. The virtual clusters are the table's eight with
  at least 400 jobs (``VIRTUAL_CLUSTERS``; the other four hold 3-8 jobs each). The held-out set has
  one window on every virtual cluster. The dev set has ``DEV_PHILLY`` windows on virtual clusters
  drawn without replacement, then its *crowded* part: one more window on every virtual cluster, on a
  cluster drawn from ``CROWDED_CLUSTERS`` (the smallest two, where 8-GPU gangs fill a type).
- **Generated workloads** (``hadar simulate --generate --multi-gpu``): ``GENERATED_JOBS`` jobs of
  Gavel's generator at each of the set's loads (``DEV_LOADS``, ``HELDOUT_LOADS`` jobs/h; the dev
  set's crowded part adds ``CROWDED_LOADS`` on ``CROWDED_CLUSTERS``).
- **Clusters**: each workload's drawn uniformly from ``CLUSTERS`` (4:8:12 to 16:16:16; 1, 4 or 8
  GPUs per node), the crowded part's from ``CROWDED_CLUSTERS``.

The held-out set is drawn first and reads nothing of the dev set: its windows avoid
``HELDOUT_AVOIDS``, a stated list of days (the days the dev set's first four windows cover, as
first drawn), so a change to the dev set's rule cannot move it. The dev set's first four windows
are those days; its crowded windows avoid every held-out day.

Disjoint by rule from each other and from every workload the rest of the project uses:

- **Dates.** A window's days (its start and the ``SPAN_DAYS - 1`` after it) are all *free*: in
  ``CALENDAR`` and not in ``USED_DAYS``, the days any Philly workload of the docs, tests or benches
  covers (their start dates, ``USED_DATES``, and every day up to their last job). A dev window
  also shares no day with any held-out window, so no Philly row is in two sets; a crowded window
  shares no day with the dev set's first four windows.
- **Seeds.** Everything else in the project imports Philly with job-type seed 0 and draws generated
  workloads with seeds below 100. Dev seeds are ``DEV_SEED`` + i (i = 1, 2, ...), held-out seeds
  ``HELDOUT_SEED`` + i: never the same, never below 100.

``tests/unit/test_evaluation.py`` checks the rules, and that the dates and seeds the docs, tests
and benches name are the ones listed here; ``bench/bench_heldout.py`` runs a set (and checks,
against the job table, that no window shares a row with a used workload).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

from hadar.errors import InputError

#: Philly's virtual clusters with at least 400 jobs, most jobs first (6214e9: 41,226 ... 2869ce: 422)
VIRTUAL_CLUSTERS = ("6214e9", "11cb48", "6c71a0", "b436b2", "ee9e8c", "0e4a51", "ed69ec", "2869ce")
#: (V100:P100:K80 counts, GPUs per node) a workload may be drawn on
CLUSTERS: tuple[tuple[str, int], ...] = (
    ("4:8:12", 1), ("4:8:12", 4), ("8:16:24", 1), ("8:16:24", 4), ("8:16:24", 8),
    ("12:12:12", 1), ("12:12:12", 4), ("16:16:16", 1), ("16:16:16", 4), ("16:16:16", 8))
SPAN_DAYS = 3
#: the days a window may start on or cover: 2017-10-01 to 2017-12-05 (every listed virtual cluster has
#: jobs from late September on; ed69ec's last is on 2017-12-05)
CALENDAR = (date(2017, 10, 1), date(2017, 12, 5))
#: the start dates the docs, tests and benches name (2018-01-01: a test's empty window)
USED_DATES = frozenset(date.fromisoformat(d) for d in (
    "2017-10-01", "2017-10-02", "2017-10-03", "2017-10-10", "2017-10-15", "2017-10-16", "2017-10-20",
    "2017-11-01", "2017-11-15", "2017-11-20", "2017-12-01", "2017-12-10", "2018-01-01"))
#: every Philly workload the project uses elsewhere: (virtual cluster, start, first N jobs or 0, days or 0);
#: bench_real_traces.py's 12 slices and 19 windows (bench_packing.py and the docs use two of the slices)
USED_PHILLY: tuple[tuple[str, str, int, float], ...] = (
    ("6214e9", "2017-10-16", 80, 0), ("6214e9", "2017-11-01", 80, 0), ("6214e9", "2017-12-01", 80, 0),
    ("11cb48", "2017-10-02", 80, 0), ("11cb48", "2017-11-15", 80, 0), ("6c71a0", "2017-10-10", 60, 0),
    ("6c71a0", "2017-11-20", 60, 0), ("b436b2", "2017-10-20", 60, 0), ("0e4a51", "2017-10-15", 60, 0),
    ("ed69ec", "2017-10-01", 60, 0), ("ee9e8c", "2017-10-01", 40, 0), ("2869ce", "2017-10-01", 30, 0),
    *((vc, start, 0, 2.0) for vc, start in (
        ("6214e9", "2017-10-03"), ("6214e9", "2017-11-20"), ("6214e9", "2017-12-10"),
        ("11cb48", "2017-10-03"), ("11cb48", "2017-11-20"), ("11cb48", "2017-12-10"),
        ("6c71a0", "2017-10-03"), ("6c71a0", "2017-11-20"), ("6c71a0", "2017-12-10"),
        ("b436b2", "2017-11-20"), ("b436b2", "2017-12-10"),
        ("ee9e8c", "2017-10-03"), ("ee9e8c", "2017-11-20"), ("ee9e8c", "2017-12-10"),
        ("0e4a51", "2017-11-20"), ("0e4a51", "2017-12-10"), ("ed69ec", "2017-10-03"),
        ("2869ce", "2017-10-03"), ("2869ce", "2017-11-20"))))
#: the days those workloads cover, from each start to its last job's submission (measured on the job
#: table; ed69ec's 60 jobs from 2017-10-01 run to 2017-10-10, 0e4a51's from 2017-10-15 to 2017-10-18)
USED_RANGES = (("2017-10-01", "2017-10-11"), ("2017-10-15", "2017-10-18"), ("2017-10-20", "2017-10-20"),
               ("2017-11-01", "2017-11-01"), ("2017-11-15", "2017-11-15"), ("2017-11-20", "2017-11-21"),
               ("2017-12-01", "2017-12-01"), ("2017-12-10", "2017-12-11"), ("2018-01-01", "2018-01-01"))
#: every generator seed the docs, tests and benches use is below this
USED_SEEDS_BELOW = 100
DEV_SEED, HELDOUT_SEED = 100, 200
DEV_PHILLY = 4
DEV_LOADS = (3.0, 9.0)
#: the dev set's crowded part: a window on every virtual cluster and generated workloads at these loads,
#: each on one of the two smallest clusters (8-GPU gangs fill a type there; every per-node size that
#: CLUSTERS pairs with them)
CROWDED_CLUSTERS = tuple(c for c in CLUSTERS if c[0] in ("4:8:12", "8:16:24"))
CROWDED_LOADS = (12.0, 18.0)
#: the days the held-out windows avoid: those of the dev set's first four windows as first drawn
#: (6c71a0 from 2017-11-24, b436b2 from 11-26, ed69ec and 11cb48 from 10-27), stated here so that the
#: held-out draw reads nothing of the dev set
HELDOUT_AVOIDS = frozenset(date(2017, 10, 27) + timedelta(days=i) for i in range(3)) | frozenset(
    date(2017, 11, 24) + timedelta(days=i) for i in range(5))
HELDOUT_LOADS = (2.0, 6.0, 12.0)
GENERATED_JOBS = 40
SETS = ("dev", "heldout")


def _days(first: str, last: str) -> frozenset[date]:
    a, b = date.fromisoformat(first), date.fromisoformat(last)
    return frozenset(a + timedelta(days=i) for i in range((b - a).days + 1))


USED_DAYS = frozenset().union(*(_days(a, b) for a, b in USED_RANGES)) | USED_DATES


@dataclass(frozen=True, slots=True)
class Workload:
    """One workload of a set: a Philly window (``vc`` set) or a generated workload (``jobs_per_hour``)."""

    name: str
    cluster: str
    gpus_per_node: int
    seed: int  # the window's job-type seed, or the generator's seed
    vc: str = ""
    start: str = ""  # ISO date (midnight)
    jobs: int = 0  # a window's cap, or the number of generated jobs
    jobs_per_hour: float = 0.0

    @property
    def philly(self) -> bool:
        return bool(self.vc)

    def days(self) -> frozenset[date]:
        """The days a Philly window may cover (none for a generated workload)."""
        if not self.philly:
            return frozenset()
        first = date.fromisoformat(self.start)
        return frozenset(first + timedelta(days=i) for i in range(SPAN_DAYS))

    def compare_argv(self, trace: Path | None = None) -> list[str]:
        """``hadar compare``'s workload and cluster arguments (``trace``: the imported window's CSV)."""
        out = ["--cluster", self.cluster, "--gpus-per-node", str(self.gpus_per_node)]
        if self.philly:
            if trace is None:
                raise InputError(f"{self.name}: a Philly window needs its imported trace")
            return ["--trace", str(trace), *out]
        return ["--generate", "--multi-gpu", "--jobs-per-hour", f"{self.jobs_per_hour:g}", "--num-jobs",
                str(self.jobs), "--seed", str(self.seed), *out]

    def command(self) -> str:
        """The shell commands that give this workload's comparison."""
        policies = "--policies hadar,max_min_fairness_perf,hadare --fork-efficiency calibrated"
        if not self.philly:
            return f"hadar compare {' '.join(self.compare_argv())} {policies}"
        imp = (f"hadar trace import philly philly.csv --vc {self.vc} --start {self.start} --days {SPAN_DAYS} "
               f"--seed {self.seed} --out all.csv && head -n {self.jobs + 1} all.csv > w.csv")
        return f"{imp} && hadar compare {' '.join(self.compare_argv(Path('w.csv')))} {policies}"


def window_jobs(vc: str) -> int:
    """A window's cap: 60 jobs on the four busiest virtual clusters (110-390 jobs a day), 40 on
    ee9e8c, 0e4a51 and ed69ec (about 15 a day), 20 on 2869ce (about 5 a day)."""
    rank = VIRTUAL_CLUSTERS.index(vc)
    return 60 if rank < 4 else 40 if rank < 7 else 20


def free_starts(taken: frozenset[date] = frozenset()) -> list[date]:
    """Start dates whose ``SPAN_DAYS`` days are all in the calendar, unused and not in ``taken``."""
    first, last = CALENDAR
    out = []
    for i in range((last - first).days + 1):
        day = first + timedelta(days=i)
        span = {day + timedelta(days=k) for k in range(SPAN_DAYS)}
        if max(span) <= last and not span & (USED_DAYS | taken):
            out.append(day)
    return out


def _windows(rng: random.Random, vcs: list[str], base_seed: int, taken: frozenset[date],
             clusters: tuple[tuple[str, int], ...] = CLUSTERS) -> list[Workload]:
    """One window per virtual cluster, in order: a free start not shared with ``taken``, a cluster of
    ``clusters``, a seed (``base_seed`` + 1, + 2, ...)."""
    out = []
    for i, vc in enumerate(vcs, start=1):
        start = rng.choice(free_starts(taken))
        cluster, per_node = rng.choice(clusters)
        name = f"{vc} {start:%m-%d} {cluster}" + (f" {per_node}/node" if per_node > 1 else "")
        out.append(Workload(name, cluster, per_node, base_seed + i, vc=vc, start=start.isoformat(),
                            jobs=window_jobs(vc)))
    return out


def _generated(rng: random.Random, loads: tuple[float, ...], base_seed: int,
               clusters: tuple[tuple[str, int], ...] = CLUSTERS) -> list[Workload]:
    out = []
    for i, rate in enumerate(loads, start=1):
        cluster, per_node = rng.choice(clusters)
        name = f"gen {rate:g}/h {cluster}" + (f" {per_node}/node" if per_node > 1 else "")
        out.append(Workload(name, cluster, per_node, base_seed + i, jobs=GENERATED_JOBS, jobs_per_hour=rate))
    return out


def _days_of(ws: tuple[Workload, ...] | list[Workload]) -> frozenset[date]:
    return frozenset().union(*(w.days() for w in ws))


def dev_set() -> tuple[Workload, ...]:
    """The dev set, drawn by ``random.Random(DEV_SEED)``: ``DEV_PHILLY`` windows on virtual clusters
    drawn without replacement (as first drawn: their days are ``HELDOUT_AVOIDS``, which the held-out
    windows avoid) and the ``DEV_LOADS`` generated workloads (seeds 101-104, 109-110), then the crowded
    part: a window on every virtual cluster (sharing no day with a held-out window or the first four)
    and the ``CROWDED_LOADS`` workloads, on ``CROWDED_CLUSTERS`` (seeds 111-118, 119-120)."""
    rng = random.Random(DEV_SEED)
    held = _days_of(heldout_set())
    n = len(VIRTUAL_CLUSTERS)
    vcs = rng.sample(VIRTUAL_CLUSTERS, DEV_PHILLY)
    first = _windows(rng, vcs, DEV_SEED, frozenset())  # as first drawn: the held-out set avoids their days
    gen = _generated(rng, DEV_LOADS, DEV_SEED + n)
    crowded = _windows(rng, list(VIRTUAL_CLUSTERS), DEV_SEED + n + len(DEV_LOADS), held | _days_of(first),
                       CROWDED_CLUSTERS)
    more = _generated(rng, CROWDED_LOADS, DEV_SEED + 2 * n + len(DEV_LOADS), CROWDED_CLUSTERS)
    return (*first, *gen, *crowded, *more)


def heldout_set() -> tuple[Workload, ...]:
    """The held-out set: a window on every virtual cluster (none on a day of ``HELDOUT_AVOIDS``),
    drawn by ``random.Random(HELDOUT_SEED)``, then ``HELDOUT_LOADS`` generated workloads."""
    rng = random.Random(HELDOUT_SEED)
    n = len(VIRTUAL_CLUSTERS)
    return (*_windows(rng, list(VIRTUAL_CLUSTERS), HELDOUT_SEED, HELDOUT_AVOIDS),
            *_generated(rng, HELDOUT_LOADS, HELDOUT_SEED + n))


def import_window(w: Workload, philly: Path, folder: Path) -> Path:
    """Import a Philly window of the job table ``philly`` as a CSV job list in ``folder``."""
    from hadar.model.throughput import ThroughputTable
    from hadar.sim.importers import PHILLY, PHILLY_GROUP, Selection, import_trace, write_rows

    pick = Selection(where=((PHILLY_GROUP, w.vc),), start=w.start, days=float(SPAN_DAYS), jobs=w.jobs)
    rows = import_trace(philly, PHILLY, pick, ThroughputTable.load(), seed=w.seed)
    out = folder / f"{w.vc}-{w.start}-s{w.seed}.csv"
    write_rows(rows, out)
    return out


def workloads(name: str) -> tuple[Workload, ...]:
    """The set called ``name`` (``dev`` or ``heldout``)."""
    if name == "dev":
        return dev_set()
    if name == "heldout":
        return heldout_set()
    raise InputError(f"unknown evaluation set {name!r} (known: {', '.join(SETS)})")
