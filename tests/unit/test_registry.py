"""The policy registry: every built-in policy module loads, or the registry fails loudly."""

from __future__ import annotations

import pytest

from hadar.errors import InputError
from hadar.policies import available, create, registry


def test_a_built_in_module_that_does_not_import_fails_loudly(monkeypatch):
    monkeypatch.setattr(registry, "_BUILTIN_MODULES", (*registry._BUILTIN_MODULES, "hadar.policies.not_written"))
    with pytest.raises(ModuleNotFoundError, match=r"hadar\.policies\.not_written"):
        available()


def test_every_built_in_module_registers_its_policies():
    names = set(available())
    assert {"max_min_fairness_perf", "isolated", "hadar", "hadare", "yarn_cs", "gandiva",
            "max_min_fairness_water_filling_packed"} <= names


def test_unknown_names_raise_input_error():
    with pytest.raises(InputError, match="unknown policy 'gandiva_v2'"):
        create("gandiva_v2")
