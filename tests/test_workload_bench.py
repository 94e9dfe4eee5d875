"""The throughput benchmark script runs end to end (tiny models on CPU; their speed numbers are not asserted)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_script_compares_both_loops(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "train_throughput.py"), "--tiny", "--steps", "4",
                           "--warmup", "0", "--variants", "", "--throughput-steps", "3", "--eval-samples", "16", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ratio (workload / baseline) samples/s" in proc.stdout
    report = json.loads(out.read_text())
    assert [r["name"] for r in report["runs"]] == ["hf_trainer_baseline", "workload_seed", "workload_throughput"]
    assert all(r["samples"] == 4 * 16 and r["samples_per_s"] > 0 for r in report["runs"][:2])
    throughput = report["runs"][2]
    assert throughput["steps"] == 3 and throughput["samples"] > 3 * 16 and throughput["levers"]["pack"]
    assert throughput["learning_rate"] > report["runs"][1]["learning_rate"]  # scaled with the step size
    assert report["summary"]["ratio_samples_per_s"] > 0
    assert report["header"]["lengths"]["median"] in range(35, 65)


def _bench_module(name):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(ROOT / "bench"))


def test_step_profile_classifies_real_kernel_names():
    """Kernel names as the H200 profile recorded them, plus ROCm's Tensile/hipBLASLt and CK attention names."""
    kind_of = _bench_module("step_profile").kind_of
    recorded = json.loads((ROOT / "bench/results/h200-profile-g4-throughput-pack1024.json").read_text())
    names = [k["name"] for k in recorded["top_kernels"]]
    assert {kind_of(n) for n in names} >= {"gemm", "attention", "triton (inductor-fused)"}
    assert kind_of("nvjet_sm90_tst_192x192_64x3_1x2_h_bz_coopB_NNN") == "gemm"
    assert kind_of("Cijk_Alik_Bljk_BBS_BH_MT128x128x64_MI16x16x16x1") == "gemm"
    assert kind_of("fmha_cutlassB_bf16_aligned_128x64_k65536_sm80") == "attention"
    assert kind_of("ck_fmha_bwd_kernel") == "attention"
    assert kind_of("triton_red_fused__to_copy_add_mean_mul_native_dropout_pow_rsqrt_0") == "triton (inductor-fused)"
    assert kind_of("multi_tensor_apply_kernel<FusedAdamMathFunctor>") == "optimizer"
    assert kind_of("elementwise_kernel<vectorized_elementwise>").startswith("other")


def test_step_profile_runs_a_preset(tmp_path):
    out = tmp_path / "profile.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "step_profile.py"), "--tiny", "--preset", "seed",
                           "--steps", "2", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["preset"] == "seed" and report["steps"] == 2 and report["samples"] == 2 * 16
    assert report["loop_seconds"] > 0 and report["device"] == "cpu"


def test_attention_bench_mask_is_causal_within_each_sample_only():
    import torch

    mask, doc = _bench_module("attention_backends").dense_mask([[3, 2]], 6, "cpu")
    m = mask[0, 0]
    assert doc.tolist() == [[0, 0, 0, 1, 1, -1]]
    assert m[2, :3].all() and not m[1, 2]  # causal inside the first sample
    assert m[4, 3:5].all() and not m[4, :3].any()  # the second sample sees only itself
    assert m[5].tolist() == [False] * 5 + [True]  # padding attends to itself only (no NaN rows)
    assert mask.dtype == torch.bool
