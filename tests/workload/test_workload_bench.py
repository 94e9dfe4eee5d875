"""The throughput benchmark script runs end to end (tiny models on CPU; their speed numbers are not asserted)."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def test_bench_script_compares_both_loops(tmp_path):
    """Baseline, seed and throughput presets, the tuned HF anchor in two processes of its own, and the Gemma 4
    shape's throughput preset in the same run; the goals read off them."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "train_throughput.py"),
            "--tiny",
            "--steps",
            "4",
            "--warmup",
            "0",
            "--variants",
            "",
            "--throughput-steps",
            "3",
            "--eval-samples",
            "16",
            "--anchor-runs",
            "2",
            "--anchor-steps",
            "3",
            "--anchor-warmup",
            "1",
            "--gemma4-steps",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tuned HF anchor: median" in proc.stdout and "gemma-2b throughput MFU" in proc.stdout
    assert proc.stdout.count("(its own process)") == 2 and proc.stdout.count("anchor warm-up (not counted)") == 2
    report = json.loads(out.read_text())
    assert [r["name"] for r in report["runs"]] == [
        "hf_trainer_baseline",
        "workload_seed",
        "workload_throughput",
        "gemma4_throughput",
    ]
    assert all(r["samples"] == 4 * 16 and r["samples_per_s"] > 0 for r in report["runs"][:2])
    throughput = report["runs"][2]
    assert throughput["steps"] == 3 and throughput["samples"] > 3 * 16 and throughput["levers"]["pack"]
    assert throughput["learning_rate"] > report["runs"][1]["learning_rate"]  # scaled with the step size
    assert report["runs"][3]["steps"] == 2 and report["runs"][3]["levers"]["pack"]
    anchors = report["anchors"]
    assert [a["name"] for a in anchors] == ["hf_anchor_group_by_length"] * 2
    assert all(a["samples"] == 3 * 16 and a["steps"] == 3 for a in anchors)
    summary = report["summary"]
    rates = sorted(a["samples_per_s"] for a in anchors)
    assert summary["anchor"]["median"] == pytest.approx(sum(rates) / 2, abs=0.01)
    assert summary["anchor"]["min"] == rates[0] and summary["anchor"]["max"] == rates[1]
    assert summary["ratios"]["workload_seed"] > 0 and "workload_throughput" in summary["ratios_to_anchor_median"]
    # on the CPU there is no peak to take an MFU against: those goals are not measured; the ratios are
    goals = {g["goal"]: g for g in summary["goals"]}
    assert goals["gemma-2b throughput MFU"]["met"] is None and goals["Gemma 4 E2B throughput MFU"]["met"] is None
    ratio = report["runs"][2]["samples_per_s"] / summary["anchor"]["median"]
    assert goals["throughput / tuned HF anchor (median)"]["value"] == pytest.approx(ratio, rel=1e-3)
    assert goals["throughput / tuned HF anchor (median)"]["met"] == (ratio >= 12)
    assert report["header"]["lengths"]["median"] in range(35, 65)


def test_the_goals_follow_the_runs_numbers():
    bench = _bench_module("train_throughput")
    runs = [
        {"name": "hf_trainer_baseline", "samples_per_s": 60.0, "mfu": 0.03, "peak_allocated_gb": 28.0},
        {"name": "workload_seed", "samples_per_s": 500.0, "mfu": 0.3, "peak_allocated_gb": 9.8},
        {"name": "workload_throughput", "samples_per_s": 1000.0, "mfu": 0.551, "peak_allocated_gb": 21.0},
        {"name": "gemma4_throughput", "error": "RuntimeError: out of memory"},
    ]
    got = {g["goal"]: g["met"] for g in bench.goals(runs, bench.spread([80.0, 90.0, 120.0]))}
    assert got == {
        "gemma-2b throughput MFU": True,
        "Gemma 4 E2B throughput MFU": None,  # failed: not measured, never met
        "throughput / tuned HF anchor (median)": False,  # 1000 / 90 = 11.1
        "seed / plain baseline, at <= 9.8 GB": True,  # 8.33x at 9.8 GB
    }
    runs[1]["peak_allocated_gb"] = 9.9
    assert not {g["goal"]: g["met"] for g in bench.goals(runs, None)}["seed / plain baseline, at <= 9.8 GB"]
    # each packed seed variant that ran is read against the seed goal too, its own peak against the bound
    runs += [
        {"name": "workload_seed_packed", "samples_per_s": 660.0, "peak_allocated_gb": 10.9},
        {"name": "workload_seed_packed_1536", "samples_per_s": 600.0, "peak_allocated_gb": 9.7},
        {"name": "workload_seed_eager", "samples_per_s": 200.0, "peak_allocated_gb": 9.0},
    ]
    seed_rows = {g["goal"]: (g["met"], g["shown"]) for g in bench.goals(runs, None) if g["goal"].startswith("seed")}
    assert seed_rows == {
        "seed / plain baseline, at <= 9.8 GB": (False, "8.33x"),
        "seed as seed_packed / plain baseline, at <= 9.8 GB": (False, "11.00x"),
        "seed as seed_packed_1536 / plain baseline, at <= 9.8 GB": (True, "10.00x"),
    }
    assert bench.spread([3.0, 1.0, 2.0, 10.0]) == {
        "runs": [3.0, 1.0, 2.0, 10.0],
        "median": 2.5,
        "min": 1.0,
        "max": 10.0,
        "spread": 3.6,
    }


def test_a_bench_stopped_part_way_keeps_every_finished_run(tmp_path):
    """--out holds each run as soon as it ends (before its progress line), whole: the session killed right after
    its third run (the packed seed steps with widths up to 1536) leaves those three runs, marked partial, and no
    temporary file."""
    out = tmp_path / "bench.json"
    cmd = [sys.executable, str(ROOT / "bench" / "train_throughput.py"), "--tiny", "--steps", "2", "--warmup", "0"]
    cmd += ["--variants", "seed_packed_1536", "--throughput-steps", "2", "--eval-samples", "8", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        progress = []
        for line in proc.stdout:
            if line.startswith("[bench +"):
                progress.append(line.split("] ", 1)[1].split(" after ")[0].strip())
            if progress and progress[-1] == "end workload_seed_packed_1536":
                break
        proc.kill()
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert progress == [
        f"{edge} {name}"
        for name in ("hf_trainer_baseline", "workload_seed", "workload_seed_packed_1536")
        for edge in ("start", "end")
    ]
    report = json.loads(out.read_text())
    assert report["partial"] and "summary" not in report
    assert [r["name"] for r in report["runs"]] == ["hf_trainer_baseline", "workload_seed", "workload_seed_packed_1536"]
    packed = report["runs"][2]
    assert packed["levers"]["pack_samples"] == [256, 512, 768, 1024, 1536] and packed["samples"] == 2 * 16
    assert packed["memory_peaks"] == {} and packed["graphed_layouts"] == 0  # the CPU: no graphs, no device memory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.json"]


def test_an_unknown_variant_is_refused_before_any_run(capsys):
    with pytest.raises(SystemExit) as exit_:
        _bench_module("train_throughput").main(["--tiny", "--variants", "seed_packed,seed_packd"])
    assert exit_.value.code == 2 and "unknown --variants: seed_packd" in capsys.readouterr().err


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
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "step_profile.py"),
            "--tiny",
            "--preset",
            "seed",
            "--steps",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["preset"] == "seed" and report["steps"] == 2 and report["samples"] == 2 * 16
    assert report["loop_seconds"] > 0 and report["device"] == "cpu"
    assert report["profiled_steps"] == 1  # step 1 (and the warm-up before it) stays out of the profile
    assert report["gemm_by_shape"] and all(r["tflops"] > 0 and r["calls"] > 0 for r in report["gemm_by_shape"])


def test_step_profile_times_gemms_by_shape():
    """A real profile of real products: one row per op and shape, its calls, M/K/N read from the operands."""
    gemm_by_shape = _bench_module("step_profile").gemm_by_shape
    a, b = torch.randn(256, 128), torch.randn(128, 192)
    with torch.profiler.profile(record_shapes=True) as prof:
        for _ in range(3):
            a @ b
        torch.addmm(torch.zeros(192), a, b)
        torch.bmm(torch.randn(3, 16, 8), torch.randn(3, 8, 4))
    rows = {(r["op"], tuple(r["m_k_n"])): r for r in gemm_by_shape(prof)}
    assert rows[("aten::mm", (256, 128, 192))]["calls"] == 3
    assert rows[("aten::addmm", (256, 128, 192))]["calls"] == 1
    assert rows[("aten::bmm", (16, 8, 4))]["batch"] == 3
    assert all(r["tflops"] > 0 for r in rows.values())


def test_step_profile_counts_kernels_not_the_ranges_over_compiled_graphs():
    """The H200 profile that counted "## Call CompiledFxGraph" ranges as kernels, fed back as its events."""
    kernel_breakdown = _bench_module("step_profile").kernel_breakdown
    recorded = json.loads((ROOT / "bench/results/h200-profile-g2b-throughput-varlen.json").read_text())["top_kernels"]
    ranges = [k["seconds"] for k in recorded if k["name"].startswith("## Call CompiledFxGraph")]
    assert ranges
    events = [
        SimpleNamespace(
            key=k["name"], device_type=torch.autograd.DeviceType.CUDA, self_device_time_total=k["seconds"] * 1e6
        )
        for k in recorded
    ]
    by_kind, top = kernel_breakdown(SimpleNamespace(key_averages=lambda: events))
    assert sum(by_kind.values()) == pytest.approx(sum(k["seconds"] for k in recorded) - sum(ranges))
    assert not any(name.startswith("##") for name, _ in top)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without a GPU")
def test_gemm_levers_says_it_needs_a_gpu():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gemm_levers.py")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "needs a GPU" in proc.stderr


def test_attention_bench_mask_is_causal_within_each_sample_only():
    import torch

    mask, doc = _bench_module("attention_backends").dense_mask([[3, 2]], 6, "cpu")
    m = mask[0, 0]
    assert doc.tolist() == [[0, 0, 0, 1, 1, -1]]
    assert m[2, :3].all() and not m[1, 2]  # causal inside the first sample
    assert m[4, 3:5].all() and not m[4, :3].any()  # the second sample sees only itself
    assert m[5].tolist() == [False] * 5 + [True]  # padding attends to itself only (no NaN rows)
    assert mask.dtype == torch.bool
