"""Attention backends for head_dim 256 (Gemma) at the workload's shapes: forward + backward time of
scaled_dot_product_attention per backend, with the mask each batch layout needs, against the same shape's
q/k/v/o + MLP GEMMs (what a decoder layer spends besides attention).

Layouts: the seed preset's padded batches (16 x 64/128/256, 8 x 512; causal + padding mask) and the throughput
preset's packed rows (8 x 1024, block-diagonal causal mask, samples of the benchmark's length distribution).
Backends: PyTorch's math, memory-efficient, flash and cuDNN SDPA kernels (flash takes no mask: timed causal-only,
the lower bound a mask-free layout could reach) and flex_attention with a block mask that skips the blocks no
sample needs (Triton, so it also runs on ROCm). A backend that cannot run a shape is reported, not hidden.

    python bench/attention_backends.py --out attention.json     # on the GPU
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from train_throughput import GEMMA_2B, synthetic_data  # noqa: E402

from workload.training.batching import packed_steps  # noqa: E402

SDPA_BACKENDS = {
    "math": SDPBackend.MATH,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "flash (causal, no mask)": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}


def timed(fn, repeats: int) -> float:
    """Median milliseconds of fn() over `repeats` runs, after two warm-up runs."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def layouts(lengths: list[int]) -> list[dict]:
    """(name, batch, width, per-row sample lengths) of the presets' micro-batch shapes."""
    out = []
    for batch, width in ((16, 64), (16, 128), (16, 256), (8, 512)):
        fits = [n for n in lengths if width // 2 < n <= width] or [width]
        rows = [[fits[i % len(fits)]] for i in range(batch)]
        out.append({"name": f"padded {batch}x{width}", "batch": batch, "width": width, "rows": rows})
    packed = packed_steps(lengths, 1024, 8, seed=0)[0]
    out.append({"name": "packed 8x1024", "batch": 8, "width": 1024, "rows": [[lengths[i] for i in r] for r in packed]})
    return out


def dense_mask(rows, width: int, device) -> torch.Tensor:
    """(batch, 1, width, width) bool: causal within each sample, nothing across samples or into padding."""
    doc = torch.full((len(rows), width), -1, dtype=torch.long)
    for r, samples in enumerate(rows):
        at = 0
        for s, n in enumerate(samples):
            doc[r, at : at + n] = s
            at += n
    doc = doc.to(device)
    causal = torch.ones(width, width, dtype=torch.bool, device=device).tril()
    same = (doc[:, :, None] == doc[:, None, :]) & (doc[:, :, None] >= 0)
    mask = (same & causal)[:, None]
    mask |= torch.eye(width, dtype=torch.bool, device=device)  # padding rows attend to themselves: no NaN
    return mask, doc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a GPU (CUDA or ROCm)", file=sys.stderr)
        return 2
    device, dtype = torch.device("cuda"), torch.bfloat16
    heads, head_dim, hidden = GEMMA_2B["num_attention_heads"], GEMMA_2B["head_dim"], GEMMA_2B["hidden_size"]
    inter = GEMMA_2B["intermediate_size"]
    ids, _ = synthetic_data(4000, 1000, seed=1)
    lengths = [len(x) for x in ids]
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    flex = torch.compile(flex_attention, dynamic=False)
    results = []
    for lay in layouts(lengths):
        b, w = lay["batch"], lay["width"]
        mask, doc = dense_mask(lay["rows"], w, device)
        q, k, v = (torch.randn(b, heads, w, head_dim, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
        grad = torch.randn(b, heads, w, head_dim, device=device, dtype=dtype)
        row = {"layout": lay["name"], "real_tokens": sum(map(sum, lay["rows"])), "tokens": b * w, "ms": {}}

        def run_sdpa(use_mask: bool):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask if use_mask else None, is_causal=not use_mask)
            out.backward(grad)

        for name, backend in SDPA_BACKENDS.items():
            try:
                with sdpa_kernel([backend]):
                    row["ms"][name] = round(timed(lambda: run_sdpa("flash" not in name), args.repeats), 3)
            except RuntimeError as e:
                row["ms"][name] = f"unsupported: {str(e).splitlines()[0][:120]}"
        try:

            def keep(bi, hi, qi, ki):
                return (doc[bi, qi] == doc[bi, ki]) & (doc[bi, qi] >= 0) & (qi >= ki) | (qi == ki)

            block = create_block_mask(keep, b, None, w, w, device=device)
            row["flex_block_density"] = round(1 - block.sparsity() / 100, 3)

            def run_flex():
                flex(q, k, v, block_mask=block).backward(grad)

            row["ms"]["flex (block mask)"] = round(timed(run_flex, args.repeats), 3)
        except Exception as e:  # noqa: BLE001 - reported
            row["ms"]["flex (block mask)"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
        # The rest of a decoder layer at this shape: q/k/v/o and gate/up/down GEMMs, forward + input backward.
        x = torch.randn(b * w, hidden, device=device, dtype=dtype, requires_grad=True)
        weights = [
            torch.randn(n, m, device=device, dtype=dtype) * 0.01
            for n, m in (
                (hidden, heads * head_dim),
                (hidden, head_dim),
                (hidden, head_dim),
                (heads * head_dim, hidden),
                (hidden, inter),
                (hidden, inter),
                (inter, hidden),
            )
        ]

        def run_gemms():
            h = x @ weights[0] + (x @ weights[1]).sum() + (x @ weights[2]).sum()
            h = h @ weights[3]
            h = ((h @ weights[4]) * (h @ weights[5])) @ weights[6]
            h.backward(torch.ones_like(h))

        row["ms"]["layer GEMMs (fwd + input bwd)"] = round(timed(run_gemms, args.repeats), 3)
        results.append(row)
        print(json.dumps(row), flush=True)
    out = {
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "heads": heads,
        "head_dim": head_dim,
        "results": results,
    }
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
