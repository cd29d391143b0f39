"""The run configuration: from flags or a ``--config`` YAML file (flags win), checked when made."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hadar.cli import build_parser
from hadar.errors import InputError
from hadar.runconfig import PolicyConfig, RunConfig, RunSection, Workload, WorldConfig, apply_config_file, from_args

GEN = ["--generate", "--jobs-per-hour", "6", "--num-jobs", "12", "--cluster", "2:2:2"]
GEN_FILE = """\
world: {rate_model: additive, restart_s: 5}
policy: {name: allox}
run:
  generate: true
  jobs_per_hour: 6
  num_jobs: 12
  cluster: "2:2:2"
  seed: 4
"""


def parsed(*argv: str):
    parser = build_parser()
    apply_config_file(parser, list(argv))
    return parser.parse_args(list(argv))


def hadar(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hadar.cli", *args], capture_output=True, text=True, check=False,
                          timeout=300)


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_flags_alone_make_the_defaults() -> None:
    assert from_args(parsed("simulate")) == RunConfig()
    c = from_args(parsed("compare", "--policies", "hadar,fifo_perf", "--baseline", "fifo_perf"))
    assert c.policy == PolicyConfig(names=("hadar", "fifo_perf"), baseline="fifo_perf")


def test_the_file_sets_each_section_and_flags_override_it(tmp_path: Path) -> None:
    path = write(tmp_path, GEN_FILE)
    c = from_args(parsed("simulate", "--config", path))
    assert c.world == WorldConfig(rate_model="additive", restart_s=5.0)
    assert c.policy.names == ("allox",)
    assert c.run == RunSection(workload=Workload(generate=True, jobs_per_hour=6.0, num_jobs=12), cluster="2:2:2",
                               seed=4)
    over = from_args(parsed("simulate", "--config", path, "--seed", "7", "--policy", "fifo_perf",
                            "--rate-model", "sync"))
    assert (over.run.seed, over.policy.name, over.world.rate_model, over.run.cluster) == (7, "fifo_perf", "sync",
                                                                                          "2:2:2")


def test_compare_takes_a_list_of_names(tmp_path: Path) -> None:
    path = write(tmp_path, "policy: {names: [hadar, fifo_perf], baseline: hadar}\n")
    assert from_args(parsed("compare", "--config", path)).policy == PolicyConfig(("hadar", "fifo_perf"),
                                                                                 baseline="hadar")


def test_a_run_from_the_file_is_the_run_from_the_flags(tmp_path: Path) -> None:
    by_file = hadar("simulate", "--config", write(tmp_path, GEN_FILE), "--json")
    by_flags = hadar("simulate", *GEN, "--seed", "4", "--policy", "allox", "--rate-model", "additive",
                     "--restart-s", "5", "--json")
    assert by_file.returncode == 0 and by_flags.returncode == 0, by_file.stderr + by_flags.stderr
    a, b = json.loads(by_file.stdout), json.loads(by_flags.stdout)
    a.pop("wall_s"), b.pop("wall_s")
    for s in (a, b):
        s.pop("decision_s_per_round"), s.pop("solve_s_total")
    assert a == b and a["jobs"] == 12 and a["policy"] == "allox" and a["world"]["rate_model"] == "additive"


def test_policy_params_are_the_profile_params(tmp_path: Path) -> None:
    params = write(tmp_path, "policy: {name: allox, params: {alpha: 0.25, move_up: false}}\n")
    profile = write(tmp_path, "slow: {policy: allox, alpha: 0.25, move_up: false}\n", "profiles.yaml")
    base = write(tmp_path, "policy: {name: allox}\n", "base.yaml")
    runs = [json.loads(hadar("simulate", *GEN, *extra, "--json").stdout)
            for extra in (["--config", params], ["--profiles", profile, "--policy", "slow"], ["--config", base])]
    with_params, with_profile, plain = runs
    assert with_params["avg_jct_s"] == with_profile["avg_jct_s"]
    assert with_params["avg_jct_s"] != plain["avg_jct_s"]  # the params took effect


@pytest.mark.parametrize(("text", "fragment"), [
    ("runs: {}\n", "unknown section 'runs'"),
    ("run: {clusters: 4:4:4}\n", "unknown key run.clusters"),
    ("world: {policy: hadar}\n", "unknown key world.policy"),
    ("run: {round_s: fast}\n", "run.round_s must be a number, got 'fast'"),
    ("run: {seed: 1.5}\n", "run.seed must be an integer"),
    ("run: {gpus_per_node: -2}\n", "--gpus-per-node must be positive, got -2"),
    ("run: {generate: true, jobs_per_hour: 2, num_jobs: -3}\n", "--num-jobs must be positive, got -3"),
    ("run: {gavel_compat: 1}\n", "run.gavel_compat must be true or false"),
    ("run: {cluster: 8:16:24}\n", "quote it"),
    ("run: {window: [1]}\n", "run.window must be a list of 2 values"),
    ("world: {rate_model: fast}\n", "world.rate_model must be one of sync, additive"),
    ("world: {restart_s: -1}\n", "--restart-s: restart_s must be a finite number of seconds >= 0"),
    ("run: {trace: nowhere.trace}\n", "trace file not found: nowhere.trace"),
    ("policy: {params: {alpha: 2}}\n", "has no parameter 'alpha'"),
    ("- 1\n", "expected a mapping with sections world, policy, run"),
])
def test_bad_files_are_one_line_exit_2(tmp_path: Path, text: str, fragment: str) -> None:
    proc = hadar("simulate", "--config", write(tmp_path, text))
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("hadar: error: ") and fragment in lines[0], lines[0]


def test_a_missing_file_and_compare_params_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="config file not found"):
        parsed("simulate", "--config", str(tmp_path / "none.yaml"))
    with pytest.raises(InputError, match=r"unknown key policy\.params"):
        parsed("compare", "--config", write(tmp_path, "policy: {params: {alpha: 1}}\n"))
    with pytest.raises(InputError, match="lists a policy twice"):
        PolicyConfig(names=("hadar", "hadar"))
    with pytest.raises(InputError, match="--seed must be >= 0"):
        RunSection(seed=-1)


def test_the_configuration_is_frozen() -> None:
    c = RunConfig()
    with pytest.raises(AttributeError):
        c.run = RunSection(seed=3)  # type: ignore[misc]


def test_the_example_file_is_a_valid_configuration() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "run.yaml"
    c = from_args(parsed("simulate", "--config", str(example)))
    assert c.policy == PolicyConfig(names=("allox",), params=(("alpha", 0.5),))
    assert c.world == WorldConfig(restart_s=0.0) and c.run == RunSection(workload=Workload(trace="max_min_fairness"))


@pytest.mark.parametrize(("command", "text", "fragment"), [
    ("run", "run: {round_s: 0}\n", "--round-s must be a positive number of seconds (the round length), got 0.0"),
    ("run", "world: {rate_model: sync}\n", "unknown key world.rate_model for `hadar run` (known: fork_efficiency)"),
    ("serve", "run: {state: STATE, port: 70000}\n", "--port must be in 0..65535, got 70000"),  # state from the file
])
def test_run_and_serve_read_their_own_flags_from_the_file(tmp_path: Path, command: str, text: str,
                                                         fragment: str) -> None:
    proc = hadar(command, "--config", write(tmp_path, text.replace("STATE", str(tmp_path / "state"))))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert fragment in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "state").exists()  # nothing made for input that is wrong


def test_the_defaults_are_the_flags_defaults() -> None:
    from hadar import cli_simulate, runconfig

    assert (runconfig.DEFAULT_POLICY, runconfig.DEFAULT_CLUSTER) == (cli_simulate.DEFAULT_POLICY,
                                                                     cli_simulate.DEFAULT_CLUSTER)
    assert RunSection().round_s == build_parser().parse_args(["simulate"]).round_s


# ---- hadar run and hadar serve: the same RunConfig, parsed only (no Ray) --------------------------------------
def test_run_and_serve_flags_make_one_run_configuration(tmp_path: Path) -> None:
    from hadar.runconfig import Training, from_training_args

    run = from_training_args(parsed("run"))
    assert run == RunConfig(run=RunSection(cluster=None, round_s=10.0), training=Training())
    given = from_training_args(parsed("run", "--cluster", "v100=2", "--round-s", "4", "--seed", "3", "--policy",
                                      "hadare", "--fork-efficiency", "calibrated", "--dilation", "2",
                                      "--pair-workers", "eager", "--jobs", "jobs.yaml", "--out", "o"))
    assert (given.run.cluster, given.run.round_s, given.run.seed, given.run.out) == ("v100=2", 4.0, 3, Path("o"))
    assert (given.policy.name, given.world.fork_efficiency) == ("hadare", "calibrated")
    assert given.training == Training(jobs="jobs.yaml", dilation=2.0, pair_workers="eager")
    serve = from_training_args(parsed("serve", "--state", "s", "--port", "0", "--min-run-s", "5"))
    assert serve.training == Training(state=Path("s"), port=0) and serve.run.min_run_s == 5.0
    assert serve.run.round_s == 10.0 and serve.policy.name == "max_min_fairness_perf"


def test_run_and_serve_read_the_file_into_the_configuration_and_flags_win(tmp_path: Path) -> None:
    from hadar.runconfig import from_training_args

    path = write(tmp_path, "world: {fork_efficiency: calibrated}\npolicy: {name: hadare}\n"
                 "run: {round_s: 4, dilation: 3, port: 9000, state: st}\n")
    serve = from_training_args(parsed("serve", "--config", path, "--round-s", "6"))
    assert (serve.run.round_s, serve.policy.name, serve.world.fork_efficiency) == (6.0, "hadare", "calibrated")
    assert serve.training is not None and (serve.training.port, serve.training.state) == (9000, Path("st"))
    with pytest.raises(InputError, match=re.escape("unknown key run.port for `hadar run`")):
        parsed("run", "--config", path)


@pytest.mark.parametrize(("argv", "fragment"), [
    (("run", "--dilation", "0.5"), "--dilation must be a number >= 1, got 0.5"),
    (("run", "--round-s", "-2"), "--round-s must be a positive number of seconds"),
    (("run", "--seed", "-1"), "--seed must be >= 0"),
    (("run", "--gpus-per-node", "0"), "--gpus-per-node must be positive"),
    (("run", "--address", "h:1", "--dashboard"), "--dashboard applies to the local cluster only"),
    (("run", "--partition", "gpu"), "--partition applies to --slurm runs only"),
    (("serve", "--state", "s", "--port", "-1"), "--port must be in 0..65535, got -1"),
    (("serve", "--state", "s", "--min-run-s", "-1"), "--min-run-s must be a number of seconds >= 0"),
    (("serve", "--state", "s", "--dilation", "nan"), "--dilation must be a number >= 1"),
])
def test_bad_run_and_serve_values_are_refused_by_the_configuration(argv: tuple[str, ...], fragment: str) -> None:
    from hadar.runconfig import from_training_args

    with pytest.raises(InputError) as e:
        from_training_args(parsed(*argv))
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_a_bad_choice_in_the_file_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, "run: {pair_workers: sometimes}\n")
    with pytest.raises(InputError, match=re.escape("run.pair_workers must be one of lazy, eager, got 'sometimes'")):
        parsed("run", "--config", path)


def test_serve_refuses_ray_settings_with_slurm() -> None:
    from hadar.service.cli import serve_config

    with pytest.raises(InputError, match="do not apply to --slurm"):
        serve_config(parsed("serve", "--state", "s", "--slurm", "--cluster", "v100=1"))
    assert serve_config(parsed("serve", "--state", "s", "--slurm")).training.slurm


def test_the_training_choices_are_the_runtimes() -> None:
    from hadar import runconfig
    from hadar.runtime import aggregate, run

    assert runconfig.FORK_OPTIMIZERS == aggregate.OPTIMIZER_POLICIES and runconfig.PAIR_WORKERS == run.PAIR_WORKERS
