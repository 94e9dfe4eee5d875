"""Data parallelism on CPU (gloo), real processes: a plain `train --nproc 2` launches itself under torchrun and
matches 1 process; a rank that dies, hangs or is interrupted ends the run non-pass in bounded time.
Plus the launcher's decisions (process count, visible-device variables, result reconciliation)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from workload import launch
from workload.result import new_result, write_result
from workload.runner import merge_rank_probes

ARGS = [
    "--preset",
    "smoke",
    "--no-probes",
    "--quiet",
    "--max-steps",
    "12",
    "--lora-dropout",
    "0",
    "--min-accuracy",
    "0",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_plain_nproc_2_launches_torchrun_and_matches_one_process(tmp_path):
    single = subprocess.run(
        [sys.executable, "-m", "workload", "train", *ARGS, "--out", str(tmp_path / "one")],
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    assert single.returncode == 0, single.stderr[-2000:]
    # the same run, started plainly with --nproc 2 and with the probes (they do not touch the training RNG)
    two_args = [a for a in ARGS if a != "--no-probes"] + ["--nproc", "2", "--out", str(tmp_path / "two")]
    multi = subprocess.run(
        [sys.executable, "-m", "workload", "train", *two_args], capture_output=True, text=True, timeout=300, env=_env()
    )
    assert multi.returncode == 0, multi.stderr[-3000:]
    assert "torch.distributed.run --standalone --nproc_per_node=2 --max_restarts=0" in multi.stderr
    one = json.loads((tmp_path / "one" / "result.json").read_text())
    two = json.loads((tmp_path / "two" / "result.json").read_text())
    assert two["status"] == "pass" and two["config"]["world_size"] == 2 and one["config"]["world_size"] == 1
    assert len(two["metrics"]["curves"]["train_loss"]) == len(one["metrics"]["curves"]["train_loss"]) == 12
    for (s1, l1), (s2, l2) in zip(one["metrics"]["curves"]["train_loss"], two["metrics"]["curves"]["train_loss"]):
        assert s1 == s2 and abs(l1 - l2) < 1e-4
    assert abs(one["metrics"]["eval_after"]["loss"] - two["metrics"]["eval_after"]["loss"]) < 1e-4
    assert one["metrics"]["eval_after"]["accuracy"] == two["metrics"]["eval_after"]["accuracy"]
    assert two["metrics"]["steps"] == 12
    # samples/s is the global rate: both runs count every sample of the 12 global batches, not a rank's half
    samples = [r["metrics"]["samples_per_s"] * r["metrics"]["train_seconds"] for r in (one, two)]
    assert samples[1] == pytest.approx(samples[0], rel=0.01) and samples[0] > 12 * 8
    probes = {p["name"]: p for p in two["probes"]}
    multi_rank = probes["multi_rank_collective"]
    assert multi_rank["status"] == "pass", multi_rank["message"]
    assert multi_rank["values"]["world_size"] == 2 and multi_rank["values"]["backend"] == "gloo"
    assert multi_rank["values"]["all_reduce_max_error"] == 0 and multi_rank["values"]["busbw_gb_s"] > 0
    # rank 0 alone wrote one result and one adapter
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [
        "adapter",
        "result.json",
        "third-party.log",
        "third-party.rank1.log",
    ]  # noise per rank


def _start_launch(tmp_path, timeout_s: int):
    """A plain `--nproc 2` run long enough to be disturbed; returns it once both ranks joined the group."""
    log = open(tmp_path / "stderr.log", "w+")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workload",
            "train",
            "--preset",
            "smoke",
            "--no-probes",
            "--quiet",
            "--max-steps",
            "500",
            "--nproc",
            "2",
            "--dist-timeout",
            str(timeout_s),
            "--out",
            str(tmp_path / "out"),
        ],
        stderr=log,
        env=_env(),
    )
    deadline = time.monotonic() + 120
    while not all(f"rank {r}/2" in (tmp_path / "stderr.log").read_text() for r in (0, 1)):
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr.log").read_text()[-3000:]
        time.sleep(0.2)
    return proc


def _rank_pid(parent: int, rank: int) -> int:
    for pid in launch.descendants(parent):
        with open(f"/proc/{pid}/environ", "rb") as f:
            if f"RANK={rank}".encode() in f.read().split(b"\0"):
                return pid
    raise AssertionError(f"no rank {rank} below {parent}")


def _finish(proc, tmp_path) -> tuple[dict, float]:
    workers = launch.descendants(proc.pid)
    start = time.monotonic()
    try:
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            for pid in [*launch.descendants(proc.pid), proc.pid]:
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 1, (tmp_path / "stderr.log").read_text()[-3000:]
    assert not [pid for pid in workers if _alive(pid)], "torchrun or a rank outlived the run"
    return json.loads((tmp_path / "out" / "result.json").read_text()), time.monotonic() - start


def test_a_killed_rank_ends_the_launched_run_with_an_error(tmp_path):
    proc = _start_launch(tmp_path, timeout_s=10)
    os.kill(_rank_pid(proc.pid, 1), signal.SIGKILL)
    result, elapsed = _finish(proc, tmp_path)
    assert result["status"] == "error" and result["error_class"] in ("process_died", "distributed_timeout"), result
    if result["error_class"] == "process_died":  # torchrun saw the death first and stopped rank 0
        assert "rank 1 (local_rank 1) failed first: exit code -9 (SIGKILL)" in result["error"]
    assert result["config"]["world_size"] == 2
    assert elapsed < 60


def test_sigterm_to_the_parent_reaches_the_ranks_and_records_interrupted(tmp_path):
    proc = _start_launch(tmp_path, timeout_s=30)
    proc.send_signal(signal.SIGTERM)
    result, elapsed = _finish(proc, tmp_path)
    assert result["status"] == "error" and result["error_class"] == "interrupted", result
    assert elapsed < 60


def test_a_signal_landing_in_a_finalizer_still_interrupts_the_run():
    """torchrun stops ranks with SIGTERM; raised inside a __del__, the KeyboardInterrupt would be dropped."""
    from workload.cli import _signals_as_interrupt

    class Finalised:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(100000))  # the handler runs here, inside __del__

    previous, start = signal.getsignal(signal.SIGTERM), time.monotonic()
    with pytest.raises(KeyboardInterrupt, match="signal 15"):
        with _signals_as_interrupt():
            Finalised()
            time.sleep(5)
    assert time.monotonic() - start < 2
    assert signal.getsignal(signal.SIGTERM) is previous


HUNG_RANK = """
import datetime, time, torch.distributed as td
td.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
time.sleep(120)  # joined the group, then never takes part in a collective
"""


def test_hung_rank_ends_the_run_with_distributed_timeout(tmp_path):
    env = _env(WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=_free_port())
    peer = subprocess.Popen([sys.executable, "-c", HUNG_RANK], env={**env, "RANK": "1", "LOCAL_RANK": "1"})
    try:
        start = time.monotonic()
        rank0 = subprocess.run(
            [sys.executable, "-m", "workload", "train", *ARGS, "--dist-timeout", "8", "--out", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=180,
            env={**env, "RANK": "0", "LOCAL_RANK": "0"},
        )
        elapsed = time.monotonic() - start
    finally:
        peer.kill()
        peer.wait()
    result = json.loads((tmp_path / "result.json").read_text())
    assert rank0.returncode == 1
    assert result["status"] == "error" and result["error_class"] == "distributed_timeout", result["error"]
    assert elapsed < 120


# --- the launcher's decisions -------------------------------------------------------------------------------


def test_process_count():
    assert launch.resolve_nproc("auto", "auto", 0) == 1
    assert launch.resolve_nproc("auto", "auto", 8) == 8
    assert launch.resolve_nproc("auto", "cuda", 2) == 2
    assert launch.resolve_nproc("auto", "cpu", 8) == 1
    assert launch.resolve_nproc("auto", "cuda:1", 8) == 1
    assert launch.resolve_nproc(2, "auto", 0) == 2  # gloo processes on the CPU
    assert launch.resolve_nproc(2, "auto", 4) == 2
    with pytest.raises(launch.LaunchRequestError, match="only 2 GPU"):
        launch.resolve_nproc(4, "auto", 2)
    with pytest.raises(launch.LaunchRequestError, match="--device cuda:1"):
        launch.resolve_nproc(2, "cuda:1", 2)
    assert launch.parse_nproc("auto") == "auto" and launch.parse_nproc("3") == 3
    for bad in ("0", "-1", "two"):
        with pytest.raises(ValueError):
            launch.parse_nproc(bad)


def test_bad_nproc_is_a_usage_error():
    proc = subprocess.run(
        [sys.executable, "-m", "workload", "train", "--nproc", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert proc.returncode == 2 and "--nproc" in proc.stderr


def test_visible_device_variables_must_agree_with_the_gpus():
    assert launch.visible_devices_problem({}, rocm=True, gpu_count=8) is None
    assert launch.visible_devices_problem({"HIP_VISIBLE_DEVICES": "0,1"}, rocm=True, gpu_count=2) is None
    assert launch.visible_devices_problem({"CUDA_VISIBLE_DEVICES": "2,3"}, rocm=False, gpu_count=2) is None
    too_many = launch.visible_devices_problem({"HIP_VISIBLE_DEVICES": "0,1,2,3"}, rocm=True, gpu_count=2)
    assert "HIP_VISIBLE_DEVICES selects 4" in too_many and "device_count() is 2" in too_many
    differ = launch.visible_devices_problem(
        {"HIP_VISIBLE_DEVICES": "0,1", "CUDA_VISIBLE_DEVICES": "0"}, rocm=True, gpu_count=2
    )
    assert "differ" in differ and "CUDA_VISIBLE_DEVICES='0'" in differ
    rocr = launch.visible_devices_problem(
        {"ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0,1"}, rocm=True, gpu_count=1
    )
    assert "ROCR_VISIBLE_DEVICES leaves only 1" in rocr


def test_ranks_get_the_arguments_without_nproc():
    argv = ["train", "--nproc", "2", "--preset", "smoke", "--nproc=auto", "--out", "D"]
    assert launch.rank_argv(argv) == ["train", "--preset", "smoke", "--out", "D"]
    command = launch.torchrun_command(argv, 2)
    assert command[1:9] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "--max_restarts=0",
        "--monitor_interval=1",
        "-m",
        "workload",
    ]


def test_torchrun_hands_every_train_option_to_the_ranks_unchanged():
    """torchrun's own parser sees the ranks' arguments: none may be taken for (or clash with) its options."""
    from torch.distributed.run import get_args_parser

    from workload.cli import _parser

    subcommands = next(a for a in _parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    argv = ["train"]
    for action in subcommands.choices["train"]._actions:
        if action.option_strings and action.dest != "help":
            argv += [action.option_strings[0], *([] if action.nargs == 0 else ["1"])]
    parsed = get_args_parser().parse_args(launch.torchrun_command(argv, 2)[3:])
    assert parsed.module and parsed.training_script == "workload"
    assert (parsed.nproc_per_node, parsed.max_restarts, parsed.standalone) == ("2", 0, True)
    assert parsed.training_script_args == launch.rank_argv(argv) and "--nproc" not in parsed.training_script_args
    assert len(parsed.training_script_args) > 30


def test_root_cause_is_read_from_torchruns_failure_summary():
    summary = """workload FAILED
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 100)
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_14:08:12
  rank      : 3 (local_rank: 1)
  exitcode  : -9 (pid: 101)  (SIGKILL)
"""
    assert launch.root_cause(summary) == "rank 3 (local_rank 1) failed first: exit code -9 (SIGKILL)"
    assert launch.root_cause("no summary") is None


def _written(tmp_path, status, error_class):
    write_result(tmp_path, dict(new_result("train"), status=status, error_class=error_class))


@pytest.mark.parametrize(
    "rank0, code, signum, expected",
    [
        (("pass", None), 0, None, ("pass", None)),
        (("pass", None), 1, None, ("error", "process_died")),  # rank 0 passed, another rank failed
        (("error", "interrupted"), 1, None, ("error", "process_died")),  # torchrun stopped rank 0
        (("error", "distributed_timeout"), 1, None, ("error", "distributed_timeout")),
        (("fail", "did_not_learn"), 1, None, ("fail", "did_not_learn")),
        (("error", "interrupted"), 1, signal.SIGTERM, ("error", "interrupted")),
        (None, 1, None, ("error", "process_died")),  # rank 0 never wrote: the parent's placeholder is left
        (None, 0, signal.SIGINT, ("error", "interrupted")),
    ],
)
def test_reconcile_never_leaves_a_pass_for_a_failed_launch(tmp_path, rank0, code, signum, expected):
    envelope = new_result("train")
    write_result(tmp_path, envelope)
    if rank0:
        _written(tmp_path, *rank0)
    exit_code, returned = launch.reconcile(
        tmp_path, envelope, code, signum, "rank 1 (local_rank 1) failed first: exit code 1"
    )
    result = json.loads((tmp_path / "result.json").read_text())
    assert {k: v for k, v in returned.items() if not k.startswith("_")} == result
    assert (result["status"], result["error_class"]) == expected
    assert ("rank 1 (local_rank 1) failed first" in result["error"]) == (expected[1] == "process_died")
    assert exit_code == (0 if expected[0] == "pass" else 1)


def test_a_probe_failing_on_another_rank_fails_the_merged_record():
    rank0 = [
        {"name": "device_discovery", "status": "pass", "values": {"arch": "gfx90a"}, "message": ""},
        {"name": "gemm_accuracy", "status": "pass", "values": {}, "message": ""},
    ]
    rank1 = [
        {"name": "device_discovery", "status": "fail", "values": {}, "message": "no code for gfx942"},
        {"name": "gemm_accuracy", "status": "pass", "values": {}, "message": ""},
    ]
    merged = merge_rank_probes([rank0, rank1])
    assert merged[0]["status"] == "fail" and merged[0]["values"] == {"arch": "gfx90a", "failed_ranks": [1]}
    assert merged[0]["message"] == "rank 1: no code for gfx942"
    assert merged[1] == rank0[1] and rank0[0]["status"] == "pass"
    assert merge_rank_probes([rank0]) == rank0


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "five"])
def test_a_dist_timeout_that_is_not_a_positive_number_is_bad_input(tmp_path, value):
    """--dist-timeout is refused before anything runs or is written (exit code 2, the flag named)."""
    proc = subprocess.run(
        [sys.executable, "-m", "workload", "train", "--dist-timeout", value, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert proc.returncode == 2, proc.stderr
    assert "--dist-timeout" in proc.stderr and "seconds above 0" in proc.stderr
    assert not (tmp_path / "out").exists()
