from __future__ import annotations

import pytest

from hadar.config import parse_cluster
from hadar.errors import InputError


def test_gavel_shorthand_one_gpu_per_node():
    c = parse_cluster("8:16:24")
    assert c.capacity() == {"v100": 8, "p100": 16, "k80": 24}
    assert len(c.nodes) == 48 and c.gpu_types == ("v100", "p100", "k80")


def test_named_counts_and_gpus_per_node():
    c = parse_cluster("a100=5,k80=2", gpus_per_node=2)
    assert c.capacity() == {"k80": 2, "a100": 5}
    assert [n.gpus for n in c.nodes] == [2, 2, 1, 2]


def test_zero_count_types_are_dropped():
    assert parse_cluster("2:0:4").capacity() == {"v100": 2, "k80": 4}


def test_node_file_with_count(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("nodes:\n  - {name: a, gpu_type: v100, gpus: 4}\n  - {name: b, gpu_type: k80, gpus: 1, count: 3}\n")
    c = parse_cluster(str(p))
    assert [(n.name, n.gpu_type, n.gpus) for n in c.nodes] == [
        ("a", "v100", 4), ("b-0", "k80", 1), ("b-1", "k80", 1), ("b-2", "k80", 1)]
    assert c.num_gpus == 7 and c.node_of[:5] == (0, 0, 0, 0, 1)


@pytest.mark.parametrize(("spec", "message"), [
    ("8:16", "want V100:P100:K80"),
    ("8:-1:2", "must not be negative"),
    ("v100=two", "must be an integer"),
    ("0:0:0", "has no GPUs"),
    ("v100=1,v100=2", "given twice"),
    ("nonsense", "not a file"),
    ("missing.yaml", "cluster file not found"),
])
def test_bad_specs(spec, message):
    with pytest.raises(InputError, match=message):
        parse_cluster(spec)


@pytest.mark.parametrize(("content", "message"), [
    ("nodes: []\n", "non-empty 'nodes' list"),
    ("nodes:\n  - {gpu_type: v100, gpus: 0}\n", "gpus must be a positive integer"),
    ("nodes:\n  - {gpu_type: v100, gpus: 2, count: -1}\n", "count must be a positive integer"),
    ("nodes:\n  - {gpus: 2}\n", "gpu_type missing"),
    ("nodes:\n  - {name: a, gpu_type: v100}\n  - {name: a, gpu_type: k80}\n", "duplicate node names: a"),
])
def test_bad_node_files(tmp_path, content, message):
    p = tmp_path / "c.yaml"
    p.write_text(content)
    with pytest.raises(InputError, match=message):
        parse_cluster(str(p))
