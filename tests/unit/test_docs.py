"""docs/policies.md's table is the registry's, and every parameter a user may set is described."""

from __future__ import annotations

import re
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


# The guide describes the system as it is; its history lives in CHANGELOG.md only.
ROOT = DOCS.parent
GUIDES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
# Commits of the public upstream projects the docs reproduce, which anyone can look up:
# Gavel (stanford-futuredata/gavel) and Sia's artifact (siasosp23/artifacts).
UPSTREAM_COMMITS = frozenset({"c4fa400", "40a22a7", "c4d18a6", "aaf7a0d"})
HISTORY = {
    "a stop number": re.compile(r"\bstops?[ -]\d+", re.IGNORECASE),
    "an issue number": re.compile(r"\bissues? \d+|(?<![\w&/])#\d+", re.IGNORECASE),
}
HEX = re.compile(r'(?<![\w"-])[0-9a-f]{7,40}(?![\w"-])')  # a quoted token is data (a request id)


def _history_tokens(text: str) -> list[str]:
    found = [f"{what}: {m.group(0)!r}" for what, rx in HISTORY.items() for m in rx.finditer(text)]
    for m in HEX.finditer(text):
        token = m.group(0)
        if re.search(r"\d", token) and re.search(r"[a-f]", token) and token not in UPSTREAM_COMMITS:
            found.append(f"a commit hash: {token!r}")
    return found


@pytest.mark.parametrize("path", GUIDES, ids=lambda p: p.name)
def test_the_guide_holds_no_history(path: Path) -> None:
    lines = path.read_text().splitlines()
    bad = [f"{path.name}:{n}: {tok}" for n, line in enumerate(lines, 1) for tok in _history_tokens(line)]
    assert not bad, "history belongs in CHANGELOG.md:\n" + "\n".join(bad)


def test_the_history_check_sees_what_it_must() -> None:
    assert _history_tokens("measured at stop 38") and _history_tokens("since Stop-27")
    assert _history_tokens("issue 19's goal") and _history_tokens("see #17")
    assert _history_tokens("side by side with e373e8b's source")
    assert _history_tokens("commit 81b34f4, one after the other")
    assert not _history_tokens("Gavel at commit c4fa400; Philly 6214e9 and 6c71a0 oct10")
    assert not _history_tokens('"request_id": "3f2a9c0e5b7d4e1f", 1795000000.2 s, stops at 5')
    assert not _history_tokens("[results](results.md#restart-costs), 0.0001234")


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("path", [*GUIDES, ROOT / "CHANGELOG.md"], ids=lambda p: p.name)
def test_every_relative_link_points_at_a_file(path: Path) -> None:
    targets = [t for t in LINK.findall(path.read_text()) if "://" not in t and not t.startswith("mailto:")]
    missing = [t for t in targets if not (path.parent / t).exists()]
    assert not missing, f"{path.name} links to missing files: {missing}"
