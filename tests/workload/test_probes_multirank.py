"""The multi-rank collective probe with two real gloo processes on this machine."""

from __future__ import annotations

import json

import torch.multiprocessing as mp

from probes_fixtures import multirank_worker


def _run(tmp_path, mode: str) -> list[list[dict]]:
    mp.spawn(multirank_worker, args=(2, str(tmp_path / "store"), mode, str(tmp_path)), nprocs=2, join=True)
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


def test_two_healthy_ranks_pass_with_bandwidth(tmp_path):
    for rank, records in enumerate(_run(tmp_path, "healthy")):
        smoke, multi = records
        assert smoke["status"] == "pass" and smoke["values"]["group"] == "existing"
        assert smoke["values"]["world_size"] == 2
        assert multi["status"] == "pass", multi
        assert multi["values"]["rank"] == rank
        assert multi["values"]["all_reduce_max_error"] == 0.0 and multi["values"]["broadcast_max_error"] == 0.0
        assert multi["values"]["bandwidth_bytes"] == 64 * 2**20
        assert multi["values"]["busbw_gb_s"] > 0
        # nccl-tests' bus bandwidth for all_reduce: algbw * 2(n-1)/n, which is algbw itself for n = 2
        assert multi["values"]["busbw_gb_s"] == multi["values"]["algbw_gb_s"]


def test_a_stuck_peer_fails_within_the_deadline(tmp_path):
    (record,), _ = _run(tmp_path, "stuck")
    assert record["status"] == "fail"
    assert "no answer from the peers within 2 s" in record["message"]
    # The message says the probe's own deadline ended the wait; the bound only says it waited that
    # deadline and never hung to gloo's 30 s group timeout (a shared 2-core machine delays by seconds).
    assert 2.0 <= record["values"]["waited_s"] < 25
