"""What a finished lease means for its job: progress, metrics, measured rates, warnings and failures.

The executor turns Ray's answers into ``LeaseOutcome`` values; ``Bookkeeper`` turns those into
the ``LeaseResult`` the ledger applies, and keeps each job's ``JobProgress``, the throughput
tracker, the job's log and the run's events up to date. Failure policy: every failed lease
(the job's code raised, its worker died, it overran the deadline, ...) counts once per round;
at ``max_failures`` the result is ``fatal`` and the job ends as failed, with the full reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from hadar.job.lease import LeaseOutcome
from hadar.model.batch import batch_type
from hadar.model.cluster import Cluster
from hadar.model.plan import Lease, LeaseResult
from hadar.runtime.merges import MergeMeter
from hadar.runtime.progress import JobProgress
from hadar.runtime.tracker import ThroughputTracker

log = logging.getLogger(__name__)


class Bookkeeper:
    def __init__(self, cluster: Callable[[], Cluster], tracker: ThroughputTracker,
                 on_event: Callable[[dict[str, Any]], None]) -> None:
        """``cluster``: the executor's cluster as it is now (nodes join and leave)."""
        self.cluster, self.tracker, self.on_event = cluster, tracker, on_event
        self.merges = MergeMeter(on_event)  # what each merge of a forked job's copies gained

    def success(self, info: JobProgress, lease: Lease, head: LeaseOutcome, round_no: int, end: float,
                forked: bool, limit: float) -> LeaseResult:
        """A lease that completed: its steps count (a forked copy's progress waits for the merge); rank 0's
        reported metrics become the job's (a forked job's: each copy's in turn, then the merged model's).

        ``limit``: the steps the lease had (the job's remaining steps, or a copy's share of them). A W-GPU
        gang advances in whole iterations of W steps, so its last iteration may go past ``limit`` (a job of
        7 steps on 2 GPUs runs 4 iterations): only ``limit`` counts as progress, as the scheduler's ledger
        expects (no lease, and no set of copies, exceeds what the job had left); its rate counts every step."""
        world = len(lease.gpus)
        done = float(head.iterations * world)
        steps = min(done, limit)
        start = info.steps
        if not forked:  # a forked copy's steps count when the copies merge
            info.iteration += head.iterations
            if head.saved_steps is not None:
                info.saved_steps = head.saved_steps
        self.metrics(info, head)
        if forked:
            eff = info.job.efficiency
            self.merges.copy_done(lease.job_id, head, lease.batch or (eff.batch if eff is not None else 0.0))
        info.restores += int(head.restored)
        if not head.continued and head.startup_s is not None and lease.copy == 0:
            info.startups.append(head.startup_s)
        info.continued += int(head.continued)
        for text in head.warnings:
            self.warn(info, text)
        if head.output:
            info.write_log(f"round {round_no}, copy {lease.copy}, GPUs {list(lease.gpus)}: output", head.output)
        self.observe(lease, done, head.train_s, end)
        self.on_event({"t": end, "event": "lease", "job": lease.job_id, "copy": lease.copy, "round": round_no,
                       "gpus": list(lease.gpus), "partner": lease.partner_id, "iterations": head.iterations,
                       "start_digest": head.start_digest,
                       "steps": steps, "progress_from": start, "progress_to": start + steps,
                       "restored": head.restored, "continued": head.continued, "train_s": head.train_s,
                       "metrics": dict(head.metrics)})
        metrics = {"train_s": head.train_s, "restore_s": head.restore_s, "save_s": head.save_s,
                   "rate": done / head.train_s if head.train_s > 0 else 0.0, "iterations": float(head.iterations),
                   **head.metrics}
        result = LeaseResult(lease.job_id, lease.copy, lease.gpus, steps, end, metrics=metrics,
                             reached_target=head.reached_target and not forked)
        if not forked:
            info.count(result)
        return result

    def failure(self, info: JobProgress, lease: Lease, round_no: int, end: float, why: str, trace: str = "",
                output: str = "") -> LeaseResult:
        """A failed lease: 0 steps; the job's failure count grows (once per round); fatal at max_failures."""
        if round_no not in info.failed_rounds:
            info.failed_rounds.add(round_no)
            info.failures += 1
        fatal = info.failures >= info.spec.max_failures
        where = f"; traceback in {info.log}" if trace and info.log is not None else ""
        info.error = why
        body = (output + "\n" if output else "") + (trace or why)
        info.write_log(f"round {round_no}, copy {lease.copy}, GPUs {list(lease.gpus)}: lease FAILED "
                       f"(failure {info.failures} of at most {info.spec.max_failures})", body)
        reason = why + where
        if fatal:
            info.ended = True
            reason = (f"failed {info.failures} time(s), max_failures {info.spec.max_failures}; last error: {why}"
                      f"{where}")
        log.warning("job %d (%s): lease on GPUs %s failed: %s", lease.job_id, info.spec.name, list(lease.gpus), why)
        self.on_event({"t": end, "event": "lease_failed", "job": lease.job_id, "copy": lease.copy,
                       "gpus": list(lease.gpus), "round": round_no, "error": why, "failures": info.failures,
                       "fatal": fatal, "log": str(info.log) if info.log else None})
        return LeaseResult(lease.job_id, lease.copy, lease.gpus, 0.0, end, failed=True, error=reason, fatal=fatal)

    def metrics(self, info: JobProgress, out: LeaseOutcome) -> None:
        self.merges.lease_started(info.job.job_id, out)  # the model it started from: a merge's, maybe
        for name, v in out.first_metrics.items():
            info.first.setdefault(name, v)
        info.last.update(out.metrics)

    def warn(self, info: JobProgress, text: str) -> None:
        """A warning about a job: logged once per job, with an event and a line in its log."""
        if text in info.warned:
            return
        info.warned.add(text)
        log.warning("job %d (%s): %s", info.job.job_id, info.spec.name, text)
        info.write_log("warning", text)
        self.on_event({"event": "job_warning", "job": info.job.job_id, "warning": text})

    def observe(self, lease: Lease, steps: float, train_s: float, t: float, profile: bool = False) -> None:
        """Feed the tracker a lease's steps/s (leases on one GPU type only); a lease sharing its GPUs with a
        partner measures the job's co-located rate next to the partner's type, not its rate alone."""
        type_of = self.cluster().gpu_type_of
        types = {type_of[g] for g in lease.gpus}
        if len(types) != 1:
            return
        (gpu_type,) = types
        k = len(lease.gpus)
        job_type = batch_type(lease.job_type, lease.batch) if lease.batch > 0 else lease.job_type  # (adaptive)
        if self.tracker.observe(job_type, k, gpu_type, steps, train_s, partner=lease.partner_type):
            self.on_event({"t": t, "event": "measured", "job": lease.job_id, "job_type": job_type, "k": k,
                           "gpu_type": gpu_type, "rate": steps / train_s, "profile": profile,
                           "partner_type": lease.partner_type})
