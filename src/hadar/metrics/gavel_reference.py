"""Gavel's published simulator numbers (spec/gavel.md section 5): seed 0, 360 s rounds,
1 GPU per node, 1,920 s re-solve cadence, ECOS. (trace, cluster, table, policy) -> (avg JCT s, makespan s, util)."""

REFERENCE = {
    ("small_test", "4:4:4", "simulation"): {
        "max_min_fairness": (305.9, 737.6, 0.407),
        "max_min_fairness_perf": (148.2, 450.4, 0.459),
        "finish_time_fairness": (260.2, 668.2, 0.371),
        "finish_time_fairness_perf": (149.7, 450.4, 0.465),
        "fifo_perf": (324.2, 623.1, 0.374),
        "min_total_duration": (312.5, 662.0, 0.445),
        "min_total_duration_perf": (189.2, 435.0, 0.420),
        "max_sum_throughput_perf": (277.6, 744.3, 0.293),
        "gandiva": (193.0, 385.6, 0.494),
        "isolated": (303.5, 789.8, 0.372),
    },
    ("medium_test", "4:4:4", "simulation"): {
        "max_min_fairness": (16574.3, 28818.0, 0.752),
        "max_min_fairness_perf": (14546.2, 23410.0, 0.795),
        "allox": (12677.6, 25551.9, 0.701),
        "finish_time_fairness": (16582.9, 28529.2, 0.755),
        "finish_time_fairness_perf": (14629.4, 23536.4, 0.796),
        "fifo_perf": (14213.5, 32326.8, 0.583),
        "min_total_duration": (18923.7, 25739.5, 0.845),
        "min_total_duration_perf": (19025.1, 19230.9, 0.992),
        "max_sum_throughput_perf": (14739.6, 24423.6, 0.792),
        "gandiva": (15349.9, 24318.5, 0.656),
        "isolated": (16553.0, 29303.2, 0.740),
    },
    ("artifact_evaluation", "4:4:4", "simulation"): {
        "max_min_fairness": (2331.9, 3965.9, 0.635),
        "max_min_fairness_perf": (1835.5, 3065.8, 0.653),
        "finish_time_fairness": (2343.5, 4253.7, 0.611),
        "finish_time_fairness_perf": (1952.0, 3047.8, 0.698),
        "fifo_perf": (2547.8, 5590.5, 0.428),
        "min_total_duration": (2326.1, 3965.9, 0.632),
        "min_total_duration_perf": (2149.2, 2363.7, 0.924),
        "max_sum_throughput_perf": (1883.7, 3751.3, 0.576),
        "gandiva": (2160.0, 4753.3, 0.380),
        "isolated": (2415.3, 4182.7, 0.630),
    },
    ("artifact_evaluation", "2:0:4", "physical"): {
        "max_min_fairness": (5254.2, 7124.9, 0.856),
        "max_min_fairness_perf": (4060.8, 5868.8, 0.832),
        "finish_time_fairness": (5048.0, 7124.4, 0.841),
        "finish_time_fairness_perf": (4262.3, 5819.9, 0.864),
        "fifo_perf": (6552.9, 12880.3, 0.586),
        "min_total_duration": (5265.6, 6335.5, 0.925),
        "min_total_duration_perf": (4589.1, 5338.3, 0.904),
        "max_sum_throughput_perf": (4003.0, 7204.4, 0.745),
        "gandiva": (4830.3, 7141.1, 0.804),
        "isolated": (5081.7, 6560.9, 0.887),
    },
}

#: Tolerance on avg JCT and makespan, the same for every row. Gavel-compatible mode replays Gavel's
#: mechanism exactly (counters, deficits, its per-round type shuffle for type-agnostic policies,
#: seeded as Gavel seeds it), so a row can differ only through the allocation the solver returns:
#: HiGHS + the analytic center, or our re-implementation of ECOS's iterations, against ECOS's own
#: point. 3 % covers what that leaves where ECOS's point is determined by the problem (measured
#: with bench/bench_gavel_reference.py: 28 of the 31 rows within it are within 0.1 %, the largest
#: deviation is 1.7 %); a row outside it is listed in KNOWN_MISSES with its cause.
TOLERANCE = 0.03

#: Policies Gavel ran that hadar does not implement (no row is run for them).
NOT_IMPLEMENTED: dict[str, str] = {}

_TIES = ("every 1-GPU job gets the same allocation (equal GPU-time shares), so Gavel's round mechanism "
         "orders them by ECOS's round-off below 1e-6; hadar breaks such exact ties by job id. Measured: "
         "Gavel with its allocations rounded to 6 decimals prints exactly hadar's numbers")
_DEGENERATE = ("finish-time fairness on GPU-time shares has a large optimal face; ECOS stops at a point of it "
               "decided by its round-off (Gavel with its allocations rounded to 6 decimals moves by 18 % on "
               "small_test, 8 % on artifact_evaluation); hadar's ECOS re-implementation follows the same "
               "iterations with other round-off, deterministically, and lands elsewhere on that face")

_PAIR_END = ("Gavel's simulator runs a pair as one micro-task and records both jobs' completion at its end (the "
             "later of the two jobs' run times), so a job that finishes early next to its partner is charged the "
             "partner's time; hadar records each job when it finishes. small_test's jobs are shorter than a round, "
             "so it shows: hadar's own event log with each paired job's finish moved to its pair's end gives "
             "193.035 s, Gavel's number; the makespan matches exactly")

#: Rows outside TOLERANCE, with their cause: (trace, cluster, policy) -> cause.
KNOWN_MISSES = {
    ("small_test", "4:4:4", "max_min_fairness"): _TIES,
    ("artifact_evaluation", "4:4:4", "max_min_fairness"): _TIES,
    ("artifact_evaluation", "2:0:4", "max_min_fairness"): _TIES,
    ("small_test", "4:4:4", "finish_time_fairness"): _DEGENERATE,
    ("small_test", "4:4:4", "gandiva"): _PAIR_END,
    ("artifact_evaluation", "4:4:4", "finish_time_fairness"): _DEGENERATE,
}
