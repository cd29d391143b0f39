"""docs/architecture.md's worked example, run as written: the policy it adds passes every contract.

The code blocks that follow the ``<!-- example: ... -->`` markers are executed in order, with the
policy registered in a copy of the registry that is dropped after each test.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from hadar.build import make_planner
from hadar.errors import InputError
from hadar.policies import registry
from hadar.policies.registry import available, create, entry
from tests.contract import test_planner_contract as planners
from tests.contract import test_policy_contract as policies

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
NAME = "shortest_first"


def example(kind: str) -> str:
    """The Python block right after ``<!-- example: kind ... -->`` in docs/architecture.md."""
    m = re.search(r"<!-- example: " + re.escape(kind) + r"\b[^>]*-->\s*```python\n(.*?)```", DOC.read_text(), re.S)
    assert m, f"docs/architecture.md has no example {kind!r}"
    return m.group(1)


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Run the example policy's block with a throw-away copy of the registry."""
    available()  # the built-ins first
    monkeypatch.setattr(registry, "_ENTRIES", dict(registry._ENTRIES))
    namespace: dict[str, Any] = {"__name__": "architecture_example"}
    exec(compile(example("policy"), str(DOC), "exec"), namespace)
    return namespace


@pytest.mark.usefixtures("registered")
def test_it_is_registered_with_its_parameter_described() -> None:
    e = entry(NAME)
    assert e.parameters() == {"slowest": 0.0}
    assert set(e.meanings()) == {"slowest"}
    assert e.traits.planner == "placement" and e.traits.cut_rounds
    with pytest.raises(InputError, match="slowest must be in"):
        create(NAME, slowest=2.0)


@pytest.mark.usefixtures("registered")
@pytest.mark.parametrize("which", sorted(policies.STATES))
def test_it_obeys_the_policy_contract(which: str) -> None:
    policies.test_is_a_policy(NAME)
    policies.test_allocation_obeys_the_contract(NAME, which)
    policies.test_deterministic_for_a_fixed_seed(NAME, which)
    policies.test_input_state_not_mutated(NAME, which)
    policies.test_empty_state_gives_empty_allocation(NAME)


@pytest.mark.usefixtures("registered")
@pytest.mark.parametrize("which", sorted(planners.STATES))
def test_its_planner_leases_what_it_allocates(which: str) -> None:
    policy, state = create(NAME), planners.STATES[which]()
    alloc = policy.allocate(state)
    plan = make_planner(policy.traits, 0).plan(state, alloc, None)
    planners.check_plan(state, alloc, plan, "counts")
    assert plan.leases, "it runs something"
    shortest = min(state.jobs, key=lambda j: (j.remaining_steps / max(j.throughputs), j.job_id))
    assert shortest.job_id in plan.job_ids  # it goes first, and every gang fits an empty cluster


def test_it_runs_by_name_and_through_a_profile(registered: dict[str, Any]) -> None:
    namespace = dict(registered)
    exec(compile(example("run"), str(DOC), "exec"), namespace)
    plain, picky = namespace["plain"], namespace["picky"]
    assert plain.summary["policy"] == NAME and picky.summary["policy"] == "picky"
    assert plain.summary["jobs_completed"] == picky.summary["jobs_completed"] == len(namespace["jobs"])
    assert plain.summary["avg_jct_s"] != picky.summary["avg_jct_s"]  # the parameter does something


def test_the_example_leaves_the_registry_as_it_was() -> None:
    assert NAME not in available()
