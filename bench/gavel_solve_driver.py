"""Times Gavel's own policies on the states bench_policies.py exports (run by Gavel's venv python
from Gavel's scheduler folder; it imports Gavel's modules, never hadar).

    python gavel_solve_driver.py STATES.json < requests > replies

STATES.json: {"<n jobs>": {"cluster": {type: count}, "jobs": [{"id", "scale_factor",
"priority_weight", "age_s", "remaining_steps", "throughputs": {type: steps/s}}]}}.
Each request line is {"policy": NAME, "size": N}; each reply line is {"time_s": seconds} (one
get_allocation on a freshly built policy, ECOS as Gavel's simulator uses) or {"error": "..."}.
The first line written is {"ready": [Gavel's policy names]}.
"""

import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.getcwd())  # Gavel's scheduler folder
import utils
from job_id_pair import JobIdPair


def gavel_inputs(state):
    """Gavel's per-job dicts (keys: JobIdPair, as its scheduler passes them) from one exported state."""
    jobs = state["jobs"]
    ids = [JobIdPair(j["id"], None) for j in jobs]
    return {
        "throughputs": {i: dict(j["throughputs"]) for i, j in zip(ids, jobs, strict=True)},
        "scale_factors": {i: j["scale_factor"] for i, j in zip(ids, jobs, strict=True)},
        "priority_weights": {i: j["priority_weight"] for i, j in zip(ids, jobs, strict=True)},
        "times_since_start": {i: j["age_s"] for i, j in zip(ids, jobs, strict=True)},
        "num_steps_remaining": {i: j["remaining_steps"] for i, j in zip(ids, jobs, strict=True)},
        "cluster_spec": dict(state["cluster"]),
    }


def allocate(policy, s):
    """One get_allocation with the arguments Gavel's scheduler gives this family of policy."""
    name = policy.name
    if name.startswith("FinishTimeFairness"):
        return policy.get_allocation(s["throughputs"], s["scale_factors"], s["priority_weights"],
                                     s["times_since_start"], s["num_steps_remaining"], s["cluster_spec"])
    if name.startswith("MaxMinFairness"):
        return policy.get_allocation(s["throughputs"], s["scale_factors"], s["priority_weights"], s["cluster_spec"])
    if name.startswith("MinTotalDuration"):
        return policy.get_allocation(s["throughputs"], s["scale_factors"], s["num_steps_remaining"],
                                     s["cluster_spec"])
    return policy.get_allocation(s["throughputs"], s["scale_factors"], s["cluster_spec"])


def time_once(name, state):
    policy = utils.get_policy(name, solver="ECOS", seed=0)
    inputs = gavel_inputs(state)
    t0 = time.perf_counter()
    allocate(policy, inputs)
    return time.perf_counter() - t0


def main():
    warnings.filterwarnings("ignore")  # cvxpy's FutureWarning about ECOS, on every solve
    with open(sys.argv[1]) as f:
        states = json.load(f)
    time_once("max_min_fairness_perf", states[min(states, key=int)])  # imports, cvxpy's first compile
    print(json.dumps({"ready": utils.get_available_policies()}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            reply = {"time_s": time_once(req["policy"], states[str(req["size"])])}
        except Exception as e:
            reply = {"error": f"{type(e).__name__}: {e}"[:300]}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
