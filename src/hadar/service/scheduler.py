"""The service: the runtime's engine fed by the store, in a thread beside the HTTP server.

Life of a job: ``submit`` checks the file (as ``hadar run`` checks its jobs), commits
the jobs, then hands them to the live source; when the engine admits one at its next
boundary, the job is first admitted by the executor (its throughput row, its
runtime record and log), and the ``StoreRecorder`` commits every change. After a
restart (even ``kill -9``) the store is the truth: jobs that never ran go back to the
source; jobs that ran are registered again and resume from their committed checkpoint
(the progress and step number it holds: at most the round in flight is lost; a job
that never saved starts over); ended jobs stay ended; cancellations asked for but not
carried out are carried out; the engine continues with the allocation in force and the
planner's and the cadence's state as last committed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hadar.build import policy_for_run, team_params
from hadar.engine import Engine, Hooks
from hadar.errors import HadarError, InputError
from hadar.mechanism.admission import validate_job
from hadar.mechanism.ledger import DONE_EPS, JobLedger, Resumed
from hadar.mechanism.quotas import QuotaPlanner
from hadar.mechanism.tenants import Tenants
from hadar.model.cluster import Cluster
from hadar.model.fork_efficiency import IDEAL
from hadar.model.fork_model import ForkSetting
from hadar.model.job import Job
from hadar.policies.profiles import PolicySpec
from hadar.runtime import checkpoint
from hadar.runtime.backend import BackendOptions
from hadar.runtime.builder import EngineOptions, build_engine
from hadar.runtime.run import check_writable
from hadar.runtime.tracker import shape_table
from hadar.service import runtime
from hadar.service.record import EventLog, StoreRecorder, cluster_json, load_engine_state
from hadar.service.source import LiveSource
from hadar.service.specs import identity, job_from_spec, parse_submission
from hadar.service.store import ENDED, NewJob, Store, Submitted
from hadar.service.tenants import OPERATOR, Principal, load_tenants

if TYPE_CHECKING:
    from hadar.slurm.serve import SlurmServe

log = logging.getLogger(__name__)


class Unavailable(HadarError):
    """The service cannot take this request now (still connecting to Ray, or its engine stopped)."""


class Conflict(HadarError):
    """The request contradicts the job's state (cancelling a job that ended)."""


class Unauthorized(HadarError):
    """The request's token is missing, wrong or revoked, or its user is not in the tenants file."""


class Forbidden(HadarError):
    """The request's user may not do this (another team's job, an admin's call)."""


@dataclass(frozen=True, slots=True)
class ServeOptions:
    state_dir: Path
    cluster: Cluster | None  # None with an address: detected from the Ray nodes
    address: str | None
    policy: str = "max_min_fairness_perf"
    profiles: Mapping[str, PolicySpec] | None = None
    round_s: float = 10.0
    seed: int = 0
    dilation: float | None = None
    fork_efficiency: ForkSetting = IDEAL  # what the forking planner counts a copy worth
    tenants_path: Path | None = None  # the tenants file (teams, quotas, users); None: one admin token
    min_run_s: float = 0.0  # a job on borrowed GPUs keeps them at least this long
    slurm: SlurmServe | None = None  # run the jobs on Slurm (``hadar.slurm.serve``), not Ray


class Service:
    """Owns the store, the live source and the engine thread; the API calls its methods."""

    def __init__(self, opts: ServeOptions, store: Store) -> None:
        self.opts, self.store = opts, store
        types = None if opts.cluster is None else set(opts.cluster.listed_types)
        self.tenants: Tenants | None = None if opts.tenants_path is None else load_tenants(opts.tenants_path, types)
        self.quotas: QuotaPlanner | None = None  # the engine's quota stage, once wired
        self.run_policy = policy_for_run(opts.policy, seed=opts.seed, profiles=opts.profiles,
                                         params=team_params(opts.policy, opts.profiles, self.tenants))
        self.log_dir = check_writable(opts.state_dir / "logs", "log folder")  # one log per job (``joblog``)
        self.events = EventLog(store, self.log_dir)
        self.clock = runtime.ServiceClock(store.clock_s())
        self.source = LiveSource(self.clock, on_boundary=self.events.flush)
        self.cluster: Cluster | None = opts.cluster
        self.state, self.error = "starting", ""
        self.rates: dict[tuple[str, int], dict[str, tuple[float | None, float, str]]] = {}
        self.backend: runtime.Backend | None = None
        self._thread: threading.Thread | None = None
        self.ray_started = threading.Event()  # set once Ray is up (the server then takes its signals back)
        self._resume = self._load()

    # ---- start and stop -----------------------------------------------------------------
    def start(self, on_exit: Callable[[], None]) -> None:
        """Start Ray and the engine in a thread; ``on_exit`` runs if the engine stops for any reason."""
        self._thread = threading.Thread(target=self._main, args=(on_exit,), name="hadar-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        self.source.stop()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _main(self, on_exit: Callable[[], None]) -> None:
        try:
            self._run()
            self.state = "stopped"
        except HadarError as e:
            self.state, self.error = "failed", str(e)
            log.error("the scheduler stopped: %s", e)
        except Exception as e:  # a bug: keep the message, stop serving
            self.state, self.error = "failed", f"{type(e).__name__}: {e}"
            log.exception("the scheduler failed")
        finally:
            on_exit()

    def _run(self) -> None:
        if self.opts.slurm is not None:  # Slurm runs the jobs, no Ray (hadar.slurm.serve)
            self._run_slurm()
            return
        try:
            sess = runtime.start_session(self.opts.cluster, self.opts.address)
        finally:
            self.ray_started.set()
        backend = None
        try:
            self.cluster = sess.cluster
            ckpt = check_writable(self.opts.state_dir / "checkpoints", "checkpoint folder")
            options = BackendOptions(checkpoint_dir=ckpt, log_dir=self.log_dir, seed=self.opts.seed,
                                     run_id=self.store.run_id, dilation=self.opts.dilation, on_event=self.events,
                                     on_dispatch=self._dispatched)
            backend = runtime.start_backend(sess, self.clock, options, self.store.throughputs())
            self._serve(backend)
        finally:
            if backend is not None:
                backend.close()
            elif sess.owned:
                runtime.session.shutdown()

    def _run_slurm(self) -> None:
        from hadar.slurm import serve as slurm_serve

        assert self.opts.slurm is not None
        measured = self.store.throughputs()
        try:
            backend: Any = slurm_serve.start_backend(
                self.opts.slurm, self.opts.state_dir, self.clock, run_id=self.store.run_id, seed=self.opts.seed,
                listeners=(self.events, self._dispatched),
                restore=lambda tracker: runtime.restore_tracker(tracker, measured),
                usage=(self._sacct_since(), self._keep_usage))
        finally:
            self.ray_started.set()
        try:
            self._serve(backend)
        finally:
            backend.close()

    def _dispatched(self, round_no: int, plan: Any) -> None:
        """The executor's ``on_dispatch``: the round's arrivals committed (and in the jobs' logs) before its
        leases print anything."""
        self.events.flush()

    def _sacct_since(self) -> float:
        """Where sacct's window starts: where the last read left it, else when the store was made."""
        return float(self.store.meta("sacct_since") or self.store.meta("created_at") or 0.0)

    def _keep_usage(self, rows: Sequence[Any], since: float) -> None:
        """sacct's records of ended leases (``hadar.slurm.accounting.Accounted``), each kept once."""
        self.store.add_slurm_usage([(a.usage.slurm_job, a.usage.gpu_type, a.usage.job, a.usage.nodes, a.usage.state,
                                     a.usage.elapsed_s, a.usage.gpus, a.end_at) for a in rows], since)

    def _serve(self, backend: runtime.Backend) -> None:
        """Wire the engine on ``backend``, resume the stored jobs into it and run it until the source stops."""
        self.backend = backend
        self.cluster = backend.executor.cluster
        engine, ledger, recorder = self._wire(backend)
        self._resume_into(ledger, recorder, backend)
        engine.resume(*load_engine_state(self.store.meta("engine")))
        self._refresh(ledger)
        self.state = "running"
        log.info("scheduling on %d GPUs (%s), policy %s", self.cluster.num_gpus,
                 ", ".join(self.cluster.gpu_types), self.run_policy.label)
        engine.run(self.source)

    def _wire(self, backend: runtime.Backend) -> tuple[Engine, JobLedger, StoreRecorder]:
        recorder = StoreRecorder(self.store, self.events, throughput_rows=lambda: runtime.tracker_rows(backend.tracker),
                                 on_commit=self._refresh)
        options = EngineOptions(round_s=self.opts.round_s, seed=self.opts.seed,
                                fork_efficiency=self.opts.fork_efficiency, tenants=self._checked_tenants(backend),
                                min_run_s=self.opts.min_run_s)
        engine, ledger = build_engine(self.run_policy.policy, backend, options,  # as `hadar run`'s
                                      Hooks(on_event=self.events, recorder=recorder))
        self.quotas = engine.planner if isinstance(engine.planner, QuotaPlanner) else None
        with self.store.transaction() as con:
            self.store.set_meta(con, "cluster", cluster_json(ledger.cluster))
            self.store.set_meta(con, "policy", self.run_policy.label)
        return engine, ledger, recorder

    def _checked_tenants(self, backend: runtime.Backend) -> Tenants | None:
        """The tenants file checked against the cluster Ray gave (with --address it was not known before)."""
        if self.opts.tenants_path is not None and self.opts.cluster is None:
            self.tenants = load_tenants(self.opts.tenants_path, set(backend.executor.cluster.listed_types))
        return self.tenants

    def reload_tenants(self, by: str) -> Tenants:
        """Read the tenants file again; it replaces the one in force only if it passes every check (else
        ``InputError``, one line, and the old file stays). Quotas apply from the next round."""
        if self.opts.tenants_path is None:
            raise InputError("the server runs without --tenants: there is no tenants file to reload")
        cluster = self.cluster
        try:
            new = load_tenants(self.opts.tenants_path, None if cluster is None else set(cluster.listed_types))
        except InputError as e:
            self.store.audit("tenants reload refused", by, {"error": str(e)})
            raise
        self.tenants = new
        if self.quotas is not None:
            self.quotas.update(new)
        self.store.audit("tenants reload", by, {"teams": [t.name for t in new.teams],
                                                "users": [u.name for u in new.users]})
        return new

    # ---- restart ----------------------------------------------------------------------
    def _load(self) -> list[tuple[Any, Job]]:
        """Unended jobs of the store: the ones that never ran go to the source now; the rest are returned
        (they resume into the ledger once Ray is up); cancellations still pending are carried out."""
        resume = []
        now = self.clock.now()
        for row in self.store.jobs(status=("queued", "running")):
            jid = int(row["id"])
            if row["cancel_requested"]:
                self._mark(jid, "cancelled", now, "")
                continue
            try:
                job = job_from_spec(jid, json.loads(row["spec"]))
            except InputError as e:  # stored by another version of hadar, say
                self._mark(jid, "failed", now, f"cannot resume: {e}")
                continue
            if row["first_start_s"] is None and not self._checkpoint(jid).exists():
                self.source.add([job])
            else:
                resume.append((row, job))
        return resume

    def _checkpoint(self, job_id: int) -> Path:
        return checkpoint.checkpoint_path(self.opts.state_dir / "checkpoints", job_id)

    def _resume_into(self, ledger: JobLedger, recorder: StoreRecorder, backend: runtime.Backend) -> None:
        """Jobs that ran before the restart: registered, then into the ledger at their checkpoint's progress."""
        now = self.clock.now()
        for row, job in self._resume:
            jid = job.job_id
            saved = runtime.saved_progress(self._checkpoint(jid), self.store.run_id, jid)
            steps = saved.steps if saved is not None else 0.0
            if steps >= float(job.total_steps) * (1 - DONE_EPS):
                self._mark(jid, "done", now, "", steps=steps)  # it finished just before the restart
                continue
            by_type = tuple(sorted((str(k), float(v)) for k, v in json.loads(row["steps_by_type"]).items()))
            resumed = Resumed(done_steps=steps, attained_gpu_s=float(row["attained_gpu_s"]),
                              first_start_s=row["first_start_s"], rounds_run=int(row["rounds_run"]),
                              restarts=int(row["restarts"]), steps_by_type=by_type)
            try:
                info = backend.executor.register(job)
                ledger.update_table(backend.tracker.table())
                ledger.add(job, resumed)
            except InputError as e:
                self._mark(jid, "failed", now, f"cannot resume: {e}")
                continue
            if saved is not None:
                runtime.resume(info, saved)
                recorder.saved[jid] = saved.steps
            event = {"t": now, "event": "resumed", "job": jid, "progress": steps, "recorded": float(row["done_steps"])}
            with self.store.transaction() as con:
                self.store.update_jobs(con, [{**recorder.row(ledger, jid), "status": "queued"}])
                self.store.add_events(con, [event])
            self.events.committed([event])
        self._resume = []

    def _mark(self, job_id: int, status: str, at_s: float, failure: str, steps: float | None = None) -> None:
        event = {"t": at_s, "event": {"done": "finish", "failed": "job_failed"}.get(status, status), "job": job_id,
                 **({"error": failure} if failure else {})}
        with self.store.transaction() as con:
            con.execute("UPDATE jobs SET status = ?, finished_s = ?, failure = ?, gpus = '[]', "
                        "done_steps = coalesce(?, done_steps), checkpoint_steps = coalesce(?, checkpoint_steps) "
                        "WHERE id = ? AND status NOT IN ('done', 'failed', 'cancelled')",
                        (status, at_s, failure, steps, steps, job_id))
            self.store.add_events(con, [event])
        self.events.committed([event])

    # ---- what the API calls ----------------------------------------------------------------
    def submit(self, text: str, name: str, base_dir: str | None, cwd: str | None, request_id: str,
               who: Principal = OPERATOR) -> Submitted:
        """Check and store a job file's jobs, then hand them to the engine. A user's jobs are their team's
        (the file's ``entity`` is replaced); an admin's keep the team the file names."""
        if self.state == "failed" or self.source.stopping:
            raise Unavailable(f"the scheduler is not running ({self.error or 'stopping'})")
        new = parse_submission(text, name, self.clock.now(), base_dir, cwd, self._check_fits)
        if who.team or not who.admin:
            new = [dataclasses.replace(n, spec={**n.spec, "entity": who.team}) for n in new]
        sub = self.store.submit(new, request_id, conflict=_name_conflict, owner=(who.user, who.team))
        if not sub.duplicate:
            self.source.add([job_from_spec(jid, n.spec) for jid, n in zip(sub.ids, new, strict=False)])
        return sub

    def _check_fits(self, jobs: Sequence[Job]) -> None:
        if self.cluster is None:
            raise Unavailable("the service is still connecting to the Ray cluster; try again in a moment")
        whole = Cluster(self.cluster.nodes)  # every node, up or not: a node that is down may come back
        table = shape_table(jobs, whole)
        for job in jobs:
            validate_job(job, whole, table, spans_types=self.run_policy.policy.traits.spans_types)

    def check_access(self, job_id: int, who: Principal) -> None:
        """``Forbidden`` unless ``who`` may see and cancel job ``job_id`` (an admin, or its team's user)."""
        if who.admin:
            return
        owner = self.store.owner(job_id)
        if owner is None or not who.may_see(owner[1]):
            raise Forbidden(f"job {job_id} is not a job of team {who.team!r}")

    def cancel(self, job_id: int, who: Principal = OPERATOR) -> str:
        """``cancelled`` (it had not started), ``cancelling`` (ends at the next round boundary)."""
        if self.store.job(job_id) is None:
            raise KeyError(job_id)
        self.check_access(job_id, who)
        status = self.store.request_cancel(job_id)
        if status is None:
            raise KeyError(job_id)
        if status in ENDED:
            raise Conflict(f"job {job_id} already ended ({status})")
        self.store.audit("cancel", who.user, {"job": job_id})
        if self.source.cancel(job_id):
            self._mark(job_id, "cancelled", self.clock.now(), "")
            return "cancelled"
        return "cancelling"

    def _refresh(self, ledger: JobLedger) -> None:
        """After each commit: the throughput view the API shows, per job type and GPU count, per GPU type:
        (measured moving average or None, the rate the scheduler uses, its kind). Rows of jobs not
        registered in this life of the service (ended before a restart) show what was measured."""
        backend = self.backend
        if backend is None:
            return
        tracker = backend.tracker
        rates: dict[tuple[str, int], dict[str, tuple[float | None, float, str]]] = {}
        for (jt, k, t), rate in tracker.measured.items():
            rates.setdefault((jt, k), {})[t] = (rate, rate, "measured")
        for e in tracker.entries():
            key, t = (e["job_type"], e["gpus"]), e["gpu_type"]
            rates.setdefault(key, {})[t] = (tracker.measured.get((*key, t)), float(e["steps_per_s"]), e["kind"])
        self.rates = rates
        self.cluster = ledger.cluster


def _name_conflict(new: NewJob, stored_id: int, stored_spec: dict[str, Any]) -> str | None:
    """Why ``new`` may not share its name (the throughput key) with stored job ``stored_id``, or None."""
    try:
        theirs = identity(job_from_spec(stored_id, stored_spec))
    except InputError:  # stored by another version of hadar: nothing to compare
        return None
    if identity(job_from_spec(0, new.spec)) == theirs:
        return None
    where = str(new.spec.get("origin") or new.name)
    return (f"{where}: job {stored_id} is also named {new.name!r} but has a different entrypoint, args or "
            "emulate_as; jobs of one name share throughput measurements: give this one another name")
