"""GEMM-side levers for the throughput preset's step, each timed in isolation on the GPU at the gemma-2b shape
(hidden 2048, MLP 16384, 8 query heads and 1 KV head of 256, LoRA r=64 alpha=16 dropout 0.1 on q/k/v/o) and
the preset's micro-batch of 8192 tokens (16 rows of 512), bf16:

  mlp_gemms   the four frozen MLP GEMMs of a layer (gate/up forward, down forward, and the two input-gradient
              GEMMs of the backward) through cuBLAS (eager) and through inductor's max-autotune (Triton templates
              benchmarked against cuBLAS; 8192 tokens only), at 8192 and 16384 tokens: TFLOP/s each
  mlp_block   forward + backward of the frozen GeGLU MLP (input gradient only, as LoRA training needs): gate and
              up as two GEMMs or as one over the concatenated weights, compiled as the layers are (default mode
              and max-autotune)
  qkv_lora    forward + backward of the q/k/v projections with LoRA (base frozen, A/B trained in fp32 under bf16
              autocast): three LoRA A matmuls with three dropout masks (what peft runs), one merged A matmul with
              one shared dropout mask, and that plus one merged base GEMM; compiled

Each case prints the median milliseconds of 20 runs (host launch time included: a small block alone can show a
larger saving than the whole step, where the GPU stays busy); a lever pays at most its saving per layer times the
layers and micro-batches of a step.

    python bench/gemm_levers.py --out levers.json     # on the GPU
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attention_backends import timed  # noqa: E402

HIDDEN, MLP, Q_OUT, KV_OUT, RANK, ALPHA, DROPOUT = 2048, 16384, 2048, 256, 64, 16, 0.1
REPEATS = 20


def _tflops(flops: float, ms: float) -> float:
    return round(flops / (ms / 1e3) / 1e12, 1)


def _compiled(fn, mode: str | None):
    import torch._dynamo

    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False, mode=mode) if mode else fn


def mlp_gemms(device) -> list[dict]:
    """TFLOP/s of the MLP's four GEMM layouts, cuBLAS vs max-autotune."""
    rows = []
    w_in = torch.randn(MLP, HIDDEN, device=device, dtype=torch.bfloat16) * 0.02  # gate or up: [out, in]
    w_out = torch.randn(HIDDEN, MLP, device=device, dtype=torch.bfloat16) * 0.02  # down: [out, in]
    for tokens in (8192, 16384):
        x = torch.randn(tokens, HIDDEN, device=device, dtype=torch.bfloat16)
        h = torch.randn(tokens, MLP, device=device, dtype=torch.bfloat16)
        layouts = {
            "gate/up forward  x @ W_in^T": (lambda: F.linear(x, w_in)),
            "down forward     h @ W_out^T": (lambda: F.linear(h, w_out)),
            "down input grad  g @ W_out": (lambda: x @ w_out),
            "gate/up input grad  g @ W_in": (lambda: h @ w_in),
        }
        flops = 2 * tokens * HIDDEN * MLP
        for name, fn in layouts.items():
            row = {"tokens": tokens, "gemm": name}
            modes = (("cublas", None), ("max_autotune", "max-autotune-no-cudagraphs"))
            for label, mode in modes if tokens == 8192 else modes[:1]:  # autotuning is slow: one size
                try:
                    ms = timed(_compiled(fn, mode), REPEATS)
                    row[label] = {"ms": round(ms, 3), "tflops": _tflops(flops, ms)}
                except Exception as exc:  # noqa: BLE001 - a mode that cannot run is reported, not hidden
                    row[label] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _mlp(merged: bool, w_gate, w_up, w_down):
    w_gate_up = torch.cat([w_gate, w_up])

    def block(x):
        if merged:
            gate, up = F.linear(x, w_gate_up).split(MLP, dim=-1)
        else:
            gate, up = F.linear(x, w_gate), F.linear(x, w_up)
        return F.linear(F.gelu(gate, approximate="tanh") * up, w_down)

    return block


def mlp_block(device, tokens: int) -> list[dict]:
    """Forward + backward of the frozen GeGLU MLP, gate/up separate vs merged."""
    w = [
        torch.randn(*s, device=device, dtype=torch.bfloat16) * 0.02
        for s in ((MLP, HIDDEN), (MLP, HIDDEN), (HIDDEN, MLP))
    ]
    x = torch.randn(tokens, HIDDEN, device=device, dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(tokens, HIDDEN, device=device, dtype=torch.bfloat16)
    rows = []
    for mode in (None, "max-autotune-no-cudagraphs"):
        for merged in (False, True):
            torch._dynamo.reset()
            block = torch.compile(_mlp(merged, *w), dynamic=False, mode=mode)

            def step():
                x.grad = None
                block(x).backward(grad)

            row = {"tokens": tokens, "gate_up": "merged" if merged else "separate", "mode": mode or "default"}
            try:
                row["ms"] = round(timed(step, REPEATS), 3)
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _qkv(layout: str, base: list, lora_a: list, lora_b: list):
    scale = ALPHA / RANK
    outs = [w.shape[0] for w in base]

    def project(x):
        if layout == "peft":  # three dropout masks, three A matmuls
            return [
                F.linear(x, w) + F.linear(F.linear(F.dropout(x, DROPOUT), a), b) * scale
                for w, a, b in zip(base, lora_a, lora_b)
            ]
        low = F.linear(F.dropout(x, DROPOUT), torch.cat(lora_a)).split(RANK, dim=-1)
        full = (
            F.linear(x, torch.cat(base)).split(outs, dim=-1)
            if layout == "merged_a_and_base"
            else [F.linear(x, w) for w in base]
        )
        return [f + F.linear(lo, b) * scale for f, lo, b in zip(full, low, lora_b)]

    return project


def qkv_lora(device, tokens: int) -> list[dict]:
    """Forward + backward of q/k/v with LoRA: peft's three A matmuls vs one merged (shared dropout mask)."""
    base = [torch.randn(n, HIDDEN, device=device, dtype=torch.bfloat16) * 0.02 for n in (Q_OUT, KV_OUT, KV_OUT)]
    lora_a = [(torch.randn(RANK, HIDDEN, device=device) * 0.02).requires_grad_() for _ in base]
    lora_b = [(torch.randn(w.shape[0], RANK, device=device) * 0.02).requires_grad_() for w in base]
    x = torch.randn(tokens, HIDDEN, device=device, dtype=torch.bfloat16, requires_grad=True)
    grads = [torch.randn(tokens, w.shape[0], device=device, dtype=torch.bfloat16) for w in base]
    rows = []
    for layout in ("peft", "merged_a", "merged_a_and_base"):
        torch._dynamo.reset()
        project = torch.compile(_qkv(layout, base, lora_a, lora_b), dynamic=False)

        def step():
            for t in [x, *lora_a, *lora_b]:
                t.grad = None
            with torch.autocast("cuda", dtype=torch.bfloat16):
                outs = project(x)
            torch.autograd.backward(outs, grads)

        row = {"tokens": tokens, "layout": layout, "ms": round(timed(step, REPEATS), 3)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="mlp_gemms,mlp_block,qkv_lora")
    p.add_argument("--tokens", type=int, default=8192, help="tokens per micro-batch for mlp_block and qkv_lora")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a GPU (torch.cuda: CUDA or ROCm)", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    cases = set(args.cases.split(","))
    out = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__, "tokens": args.tokens}
    if "mlp_gemms" in cases:
        out["mlp_gemms"] = mlp_gemms(device)
    if "mlp_block" in cases:
        out["mlp_block"] = mlp_block(device, args.tokens)
    if "qkv_lora" in cases:
        out["qkv_lora"] = qkv_lora(device, args.tokens)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
