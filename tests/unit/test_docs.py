"""docs/policies.md's table is the registry's, and every parameter a user may set is described."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from hadar.policies import catalog
from hadar.policies.registry import available, entry, register

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_policy_table_is_up_to_date() -> None:
    text = (DOCS / "policies.md").read_text()
    assert catalog.generated() in text, ("docs/policies.md is out of date: run "
                                         "`python -m hadar.policies.catalog docs/policies.md`")


@pytest.mark.parametrize("name", sorted(available()))
def test_every_parameter_is_described(name: str) -> None:
    e = entry(name)
    missing = [p for p in e.parameters() if p not in e.meanings()]
    assert not missing, f"{name}: describe {', '.join(missing)} in {e.cls.__name__}.PARAMS"


def test_a_description_of_a_parameter_the_class_does_not_take_is_refused() -> None:
    from hadar.policies.base import PolicyTraits

    class Stale:
        TRAITS: ClassVar[PolicyTraits] = PolicyTraits()
        PARAMS: ClassVar[dict[str, str]] = {"gone": "a knob that was removed"}

        def allocate(self, state: object) -> None: ...

    with pytest.raises(TypeError, match="PARAMS describes 'gone'"):
        register("test_stale_params", "never registered")(Stale)
    assert "test_stale_params" not in available()


def test_rewrite_replaces_only_the_generated_part(tmp_path: Path) -> None:
    doc = tmp_path / "p.md"
    doc.write_text(f"intro\n\n{catalog.BEGIN}\nold table\n{catalog.END}\n\nend\n")
    assert catalog.rewrite(doc)
    text = doc.read_text()
    assert text.startswith("intro\n\n") and text.endswith("\n\nend\n") and "old table" not in text
    assert catalog.generated() in text
    assert not catalog.rewrite(doc)  # already up to date


def test_the_docs_link_the_architecture_and_the_policies() -> None:
    index = (DOCS / "index.md").read_text()
    assert "architecture.md" in index and "policies.md" in index
