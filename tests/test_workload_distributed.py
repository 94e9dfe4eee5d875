"""Data parallelism on CPU (gloo): 2 ranks match 1 process; a hung rank ends the run with distributed_timeout."""

import json
import os
import socket
import subprocess
import sys
import time

ARGS = ["--preset", "smoke", "--no-probes", "--quiet", "--max-steps", "12", "--lora-dropout", "0",
        "--min-accuracy", "0"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def test_two_gloo_ranks_match_one_process(tmp_path):
    single = subprocess.run([sys.executable, "-m", "workload", "train", *ARGS, "--out", str(tmp_path / "one")],
                            capture_output=True, text=True, timeout=300, env=_env())
    assert single.returncode == 0, single.stderr[-2000:]
    multi = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                            "--master_port", str(_free_port()), "-m", "workload", "train", *ARGS,
                            "--out", str(tmp_path / "two")],
                           capture_output=True, text=True, timeout=300, env=_env())
    assert multi.returncode == 0, multi.stderr[-3000:]
    one = json.loads((tmp_path / "one" / "result.json").read_text())
    two = json.loads((tmp_path / "two" / "result.json").read_text())
    assert two["status"] == "pass" and two["config"]["world_size"] == 2 and one["config"]["world_size"] == 1
    for (s1, l1), (s2, l2) in zip(one["metrics"]["curves"]["train_loss"], two["metrics"]["curves"]["train_loss"]):
        assert s1 == s2 and abs(l1 - l2) < 1e-4
    assert abs(one["metrics"]["eval_after"]["loss"] - two["metrics"]["eval_after"]["loss"]) < 1e-4
    assert one["metrics"]["eval_after"]["accuracy"] == two["metrics"]["eval_after"]["accuracy"]
    # rank 0 alone wrote one result and one adapter
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == ["adapter", "result.json"]


HUNG_RANK = """
import datetime, time, torch.distributed as td
td.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
time.sleep(120)  # joined the group, then never takes part in a collective
"""


def test_hung_rank_ends_the_run_with_distributed_timeout(tmp_path):
    env = _env(WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=_free_port(), WORKLOAD_DIST_TIMEOUT_S=8)
    peer = subprocess.Popen([sys.executable, "-c", HUNG_RANK], env={**env, "RANK": "1", "LOCAL_RANK": "1"})
    try:
        start = time.monotonic()
        rank0 = subprocess.run([sys.executable, "-m", "workload", "train", *ARGS, "--out", str(tmp_path)],
                               capture_output=True, text=True, timeout=180,
                               env={**env, "RANK": "0", "LOCAL_RANK": "0"})
        elapsed = time.monotonic() - start
    finally:
        peer.kill()
        peer.wait()
    result = json.loads((tmp_path / "result.json").read_text())
    assert rank0.returncode == 1
    assert result["status"] == "error" and result["error_class"] == "distributed_timeout", result["error"]
    assert elapsed < 120
