"""What each of Hadar's parameters does (``HadarPolicy.PARAMS``; docs/policies.md renders them in one
table, with their defaults)."""

from __future__ import annotations

from collections.abc import Mapping

PARAMS: Mapping[str, str] = {
    "utility": "what progress is worth: `jct` (shortest remaining first; the plan needs it), `fifo`, `fair` "
               "or `throughput`",
    "rate_model": "pace of a gang spanning GPU types: `sync` (its slowest type's) or `additive` (every GPU "
                  "adds its share; valid only with local batch sizes in proportion to each GPU's speed)",
    "steepness": "exponent on the price curve L (U/L)^(steepness x share taken): how fast a type's price "
                 "rises as it fills",
    "exponent": "exponent of the `jct` utility's shortest-remaining term",
    "aging_s": "a job's weight grows by 1 for every this many seconds it waited without GPUs (null: off)",
    "restart_s": "checkpoint-restore cost (s) charged to any placement other than the job's previous one "
                 "(null: each job's own `restart_s`, the cost the simulator charges: 0 unless the job file "
                 "or `--restart-s` gives one)",
    "fill": "after the priced pass, give GPUs still free to waiting jobs",
    "keep_slack": "TTD keeper: a round may push the horizon of all remaining work out by at most this share "
                  "of a round, else it is re-planned (null: keeper off)",
    "keep_busy": "the keeper's slack while jobs are still arriving (one arrived within `keep_quiet` x the "
                 "horizon; null: always `keep_slack`)",
    "keep_quiet": "how recent an arrival, as a share of the horizon, means jobs are still arriving",
    "keep_whole": "with at most this many active jobs, all of which fit at once, the keeper re-plans in whole "
                  "gangs (a small MIP) rather than rounding the LP plan",
    "keep_fair": "the keeper never holds back a job that never ran, nor one whose finish-time fairness so far "
                 "(time since arrival plus remaining best-type time, over its best-type time alone) exceeds "
                 "this: they are placed before the jobs the horizon needs (null: the keeper holds back any job)",
    "keep_short": "the keeper never holds back a job whose remaining time on its best type is at most this many "
                  "rounds: a short job costs the horizon little, and holding it back costs its JCT hours "
                  "(null: off)",
    "keep_own": "when one job's own length sets the horizon (the horizon is at most 1.01x the longest remaining "
                "best-type time) and no job arrived within 2 % of the horizon, the keeper never holds back a "
                "job whose remaining best-type time is at most this share of the horizon: the drain waits for "
                "that job anyway (null: off)",
    "ftf_cap": "where the TTD keeper re-plans a round, a job that its best type would finish within this round, "
               "and that the re-plan would finish later than this many times its best-type time after its "
               "arrival while the JCT plan's round would not, keeps the plan's GPUs (null: off)",
    "keep_max_jobs": "above this many active jobs the keeper is skipped (null: never)",
    "first_round": "a job that never ran goes ahead of every job that has (it starts at the first round "
                   "boundary after it arrives)",
    "plan": "`lp`: the round comes from a fluid plan that minimizes the mean time at which the remaining work "
            "gets done (keeper.jct_plan), in whole gangs; `pack`: spec section 3's packing alone",
    "plan_total": "the fluid plan's span, as a multiple of the TTD horizon",
    "plan_max_jobs": "above this many active jobs the plan is skipped (null: never)",
    "warm_start": "start the JCT plan's LP and the horizon LPs from last round's simplex bases, carried over "
                  "job by job across arrivals and completions (a quarter of the CPU time of cold starts at steady "
                  "state; the LPs' answers are rounded and the plan breaks ties by a rule, so warm and cold starts "
                  "decide alike: docs/hadar.md, \"Warm starts\")",
    "lp_jobs": "above this many active jobs the plan's and the keeper's LPs see groups of alike jobs (same "
               "rates, gang size and weight, similar work left), at most this many (groups.py)",
    "share": "space sharing: a job left waiting may share the GPUs of a placed job of the same GPU count that "
             "it packs well with (the table's co-located rates), priced at the host's utility loss "
             "(docs/packing.md)",
    "share_gain": "with `share`: a pair shares only when its two co-located rates, each over the job's rate "
                  "alone, sum to more than this",
}
