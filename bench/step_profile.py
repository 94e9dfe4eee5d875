"""Where a training step's GPU time goes: kernel time by kind (GEMM, attention, inductor-fused Triton, eager
elementwise, optimizer, copies) and how much of the wall time the GPU sits idle, for one preset.

It answers whether hand-written fused kernels (RMSNorm, RoPE, GeGLU, loss) or another attention backend could
still pay: their ceiling is the share of time of the kernels they would replace. Same model, data and recipe
as bench/train_throughput.py; the preset runs once untimed (compilation), then `--steps` steps again, steps 2 to N
under torch.profiler (so the warm-up passes train() runs before its loop stay out).

    python bench/step_profile.py --preset throughput --steps 8 --out profile.json     # on the GPU
    python bench/step_profile.py --tiny --preset seed --steps 2                         # a CPU check
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from train_throughput import PAD, build_model, model_shape, synthetic_data  # noqa: E402

from workload.model.classifier import apply_lora, make_trainable_fp32  # noqa: E402
from workload.probes import environment as env  # noqa: E402
from workload.training.loop import Tokenised, _sync, train  # noqa: E402
from workload.training.presets import PRESETS  # noqa: E402

# Kernel kinds by name, first match wins. GEMM names: cuBLAS/cuBLASLt/CUTLASS (gemm, nvjet, xmma, cutlass) and
# rocBLAS/hipBLASLt/Tensile (Cijk_...); attention: PyTorch's flash / memory-efficient / cuDNN / CK fmha kernels.
KINDS = [
    ("attention", re.compile(r"fmha|flash|attention|attn|mem_eff|cudnn_sdpa", re.I)),
    ("gemm", re.compile(r"gemm|nvjet|xmma|cutlass|Cijk_|cublas|hipblaslt|splitk", re.I)),
    ("optimizer", re.compile(r"multi_tensor|adam", re.I)),
    ("triton (inductor-fused)", re.compile(r"^triton_|^triton", re.I)),
    ("copy / memset", re.compile(r"memcpy|memset|copy", re.I)),
]


def kind_of(name: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "other (eager elementwise, reductions, indexing)"


def kernel_breakdown(prof) -> tuple[dict[str, float], list[tuple[str, float]]]:
    """(seconds of device time per kind, top kernels by time) from a finished profiler."""
    by_kind: dict[str, float] = {}
    kernels = []
    for evt in prof.key_averages():
        if evt.device_type != torch.autograd.DeviceType.CUDA or evt.key.startswith("## "):
            continue  # "## Call CompiledFxGraph ... ##": a range over a compiled graph's kernels, not a kernel
        seconds = evt.self_device_time_total / 1e6
        if seconds <= 0:
            continue
        by_kind[kind_of(evt.key)] = by_kind.get(kind_of(evt.key), 0.0) + seconds
        kernels.append((evt.key, seconds))
    return by_kind, sorted(kernels, key=lambda k: -k[1])[:15]


GEMM_OPS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1)}  # op -> (index of A, index of B)


def gemm_by_shape(prof) -> list[dict]:
    """Time and achieved TFLOP/s of each GEMM op and input shape (needs record_shapes), largest first: device
    time where the ops ran on a GPU, CPU time where they ran on the CPU."""
    rows = []
    for evt in prof.key_averages(group_by_input_shape=True):
        if evt.key not in GEMM_OPS or not evt.input_shapes:
            continue
        a, b = (evt.input_shapes[i] for i in GEMM_OPS[evt.key])
        if len(a) < 2 or len(b) < 2:
            continue
        batch = a[0] if evt.key == "aten::bmm" else 1
        m, k, n = a[-2], a[-1], b[-1]
        seconds = (evt.device_time_total or evt.cpu_time_total) / 1e6
        if seconds <= 0:
            continue
        flops = 2 * batch * m * k * n * evt.count
        rows.append(
            {
                "op": evt.key,
                "m_k_n": [m, k, n],
                "batch": batch,
                "calls": evt.count,
                "seconds": float(f"{seconds:.4g}"),
                "tflops": float(f"{flops / seconds / 1e12:.4g}"),
            }
        )
    return sorted(rows, key=lambda r: -r["seconds"])


def profiled_train(model, data: Tokenised, recipe, device, dtype: str, steps: int):
    """train() for `steps` steps with the torch profiler on from step 2: the warm-up passes train() runs first and
    step 1 stay out of the profile. Returns (train's stats, the profiled steps' wall seconds, the stopped profile)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    prof = torch.profiler.profile(activities=activities, record_shapes=True)
    begin = []

    def start_after_first_step(step_no, _total, _loss):
        if step_no == 1:
            _sync(device)
            prof.start()
            begin.append(time.perf_counter())

    # log_every=1: train() reports every step (a host sync per step, as its logging does)
    stats = train(
        model,
        data,
        recipe.replace(max_steps=steps, epochs=1, log_every=1),
        device=device,
        dtype=dtype,
        pad_id=PAD,
        on_step=start_after_first_step,
    )
    _sync(device)
    wall = time.perf_counter() - begin[0]
    prof.stop()
    return stats, wall, prof


def kernel_time(prof, wall: float) -> dict:
    """A stopped profile's kernel time over `wall` seconds: in all, as a share of the wall time (GPU busy), by kind,
    the top kernels and the GEMMs by shape."""
    by_kind, top = kernel_breakdown(prof)
    total = sum(by_kind.values())
    return {
        "kernel_seconds": round(total, 4),
        "gpu_busy_fraction": round(total / wall, 4) if wall else None,
        "by_kind": {
            k: {"seconds": round(v, 4), "share": round(v / total, 4) if total else None}
            for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])
        },
        "top_kernels": [{"name": n[:160], "seconds": round(t, 4)} for n, t in top],
        "gemm_by_shape": gemm_by_shape(prof)[:20],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=["seed", "throughput"], default="throughput")
    p.add_argument("--steps", type=int, default=8, help="optimizer steps (the profile covers steps 2 to N)")
    p.add_argument("--shape", choices=["gemma-2b", "gemma4-e2b"], default="gemma-2b")
    p.add_argument("--tiny", action="store_true", help="tiny model of that family (a CPU check)")
    p.add_argument("--eager", action="store_true", help="without compiled layers")
    p.add_argument("--no-graph-steps", action="store_true", help="seed: without the captured step graphs")
    p.add_argument(
        "--varlen",
        choices=["on", "off"],
        help="throughput: packed rows through varlen attention kernels or dense masks (default: the preset's)",
    )
    p.add_argument(
        "--merged-qkv",
        choices=["on", "off"],
        help="q/k/v merged (one base and one LoRA-A GEMM) or peft's three projections (default: the preset's)",
    )
    p.add_argument(
        "--single-pass",
        action="store_true",
        help="profile the first pass (its compile warm-up stays out of the profile all the same); no unprofiled timing",
    )
    p.add_argument("--out", type=Path, help="write the breakdown as JSON here")
    args = p.parse_args(argv)

    device = env.pick_device("auto")
    dtype = "bf16" if device.type == "cuda" else "fp32"
    shape = model_shape(args.shape, args.tiny)
    recipe = PRESETS[args.preset].replace(dtype=dtype, log_every=1000, compile=not args.eager)
    if args.no_graph_steps or args.eager:
        recipe = dataclasses.replace(recipe, graph_steps=False)
    if args.varlen:
        recipe = dataclasses.replace(recipe, varlen_attention=args.varlen == "on")
    if args.merged_qkv:
        recipe = dataclasses.replace(recipe, merged_qkv=args.merged_qkv == "on")
    if args.tiny and recipe.pack:  # rows the tiny model's 512 positions hold
        recipe = recipe.replace(tokens_per_step=2048, pack_length=512, micro_batch_tokens=1024)
    per_step = (recipe.tokens_per_step // 68 + 1) if recipe.tokens_per_step else recipe.batch_size
    ids, labels = synthetic_data(args.steps * per_step, shape.get("vocab_size", 262144), seed=1)
    data = Tokenised(ids, labels, ids[:8], labels[:8])
    model = apply_lora(
        build_model(shape, device, recipe.seed, recipe.dtype),
        recipe.lora_r,
        recipe.lora_alpha,
        recipe.lora_dropout,
        recipe.target_modules,
    )
    make_trainable_fp32(model)
    first = None
    if not args.single_pass:
        print(f"untimed pass ({args.steps} steps; compiles on the GPU) ...", flush=True)
        first = train(
            model, data, recipe.replace(max_steps=args.steps, epochs=1), device=device, dtype=dtype, pad_id=PAD
        )
    print(f"profiled pass (steps 2 to {args.steps}) ...", flush=True)
    stats, wall, prof = profiled_train(model, data, recipe, device, dtype, args.steps)
    out = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "versions": env.versions(),
        "shape": shape,
        "preset": args.preset,
        "compiled_layers": stats.compiled_layers,
        "compile_error": stats.compile_error,
        "graph_steps": recipe.graph_steps,
        "graph_error": stats.graph_error,
        "graphed_layouts": stats.graphed_layouts,
        "varlen_attention": stats.varlen_attention,
        "varlen_error": stats.varlen_error,
        "merged_qkv_blocks": stats.merged_qkv_blocks,
        "steps": stats.steps,
        "samples": stats.samples,
        "loop_seconds": round(stats.seconds, 4),
        "profiled_steps": stats.steps - 1,
        "profiled_wall_seconds": round(wall, 4),
        "unprofiled_loop_seconds": round(first.seconds, 4) if first else None,
        "warmup_seconds": round(stats.warmup_seconds, 1),
        **kernel_time(prof, wall),
    }
    print(json.dumps(out, indent=1), flush=True)
    if out["kernel_seconds"]:
        print(f"\n{'kind':<50}{'seconds':>10}{'share':>8}")
        for kind, row in out["by_kind"].items():
            print(f"{kind:<50}{row['seconds']:>10.3f}{row['share'] * 100:>7.1f}%")
        print(f"\n{'GEMM (M, K, N)':<36}{'calls':>7}{'seconds':>10}{'TFLOP/s':>9}")
        for row in out["gemm_by_shape"]:
            print(
                f"{row['op'] + ' ' + str(row['m_k_n']):<36}{row['calls']:>7}{row['seconds']:>10.3f}{row['tflops']:>9.1f}"
            )
        unprofiled = f"all {stats.steps} steps without the profiler: {first.seconds:.2f} s" if first else "one pass"
        print(f"GPU busy {out['gpu_busy_fraction'] * 100:.1f}% of steps 2-{stats.steps}'s {wall:.2f} s ({unprofiled})")
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
