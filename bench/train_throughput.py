"""Training throughput: this workload's presets vs the plain HF Trainer + peft baseline, one process, one device.

All runs train the seed recipe's hyperparameters (LoRA r=64/alpha=16/dropout 0.1 on q/k/v/o, full `score` head,
lr 2e-4, warmup 100, weight decay 0.01) on the same randomly initialised classifier (gemma-2b shape, or the Gemma 4
text shape with --shape gemma4-e2b) and the same synthetic variable-length data (log-normal lengths: median ~49,
mean ~68, p95 ~187, capped at 512), in bf16. Runs, in order:
  tuned HF anchor            (--anchor-runs N, each in its own process, before the others) HF Trainer + peft as the
                             baseline, with transformers' length grouping (group_by_length: batches of similar
                             lengths, so less padding); its median and spread are printed, and the throughput
                             preset's ratio to the median
  hf_trainer_baseline        16 samples per step, each batch padded to its longest sample (dynamic padding)
  workload_seed              the `seed` preset: 16 samples per step, widths 64/128/256/512, micro-batches of at
                             most 2048 padded tokens, compiled decoder layers, each step layout's whole step
                             replayed as one captured graph (compile and capture warm-up not timed)
  workload_seed_packed       the same steps packed padding-free (presets.PACKED_SEED): each step's 16 samples in
                             one row (two over 2048 tokens) of 256..1024, 1536 or 2048 tokens, varlen attention,
                             compiled layers, step graphs; the step layouts are captured largest first
                                                                                  (--variants seed_packed)
  workload_seed_packed_1536  the same with rows of at most 1536 tokens (a step over 1536 in two or more rows)
                                                                                  (--variants seed_packed_1536)
  workload_seed_eager        the same without compiled layers or graphs                (--variants seed_eager)
  workload_throughput_eager  the `throughput` preset without compiled layers     (--variants throughput_eager)
  workload_throughput        the `throughput` preset: ~16k tokens per step packed padding-free into 512-token
                             rows, lr scaled by sqrt(samples per step / 16), compiled layers
  gemma4_throughput          (--gemma4-steps N) the throughput preset on the Gemma 4 E2B shape, in the same run
Levers under evaluation, each its own run (--variants):
  workload_seed_nographs     seed without the captured step graphs (compiled layers only)
  workload_throughput_nodropout  throughput with LoRA dropout 0: the ceiling of removing dropout's copies
                             (changes the recipe; a measurement, not a lever)
  workload_throughput_unmerged  throughput with q/k/v through peft's three projections and three dropout masks
                             (the preset before merged q/k/v)
  workload_throughput_cdt    throughput with inductor's coordinate-descent tuning of its fused kernels' launch
                             configurations while compiling (torch._inductor.config.coordinate_descent_tuning)
Prints samples/s, non-pad tokens/s, MFU (4 x non-embedding parameters FLOPs per non-pad token over the device's
dense bf16 peak), MFU with attention-score FLOPs added (PaLM appendix B), peak memory, final eval loss, and the
ratios to the baseline and the anchor, and the issue's four goals met or missed (the seed goal also for each packed
seed variant that ran); per workload run on a GPU, the step layouts captured and the peak allocated/reserved memory
after its compile warm-up, capture and steps. A line "[bench +SECONDS s] start|end RUN" marks each run (the time since
the runs began); --out is rewritten (whole: a temporary file renamed over it) after every finished run, marked
"partial" until the summary comes, so a session stopped part-way keeps every finished run's numbers.

    python bench/train_throughput.py --steps 200 --throughput-steps 40 --anchor-runs 3 --gemma4-steps 20 \
        --out bench.json                                                                  # on the GPU
    python bench/train_throughput.py --tiny --steps 6                                     # a CPU check
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workload.model.classifier import LastTokenClassifier, apply_lora, count_parameters, make_trainable_fp32  # noqa: E402
from workload.probes import environment as env  # noqa: E402
from workload.training.loop import Tokenised, evaluate, train  # noqa: E402
from workload.training.metrics import attention_flops, attention_layers, flops_per_token, mfu, mfu_from_flops  # noqa: E402
from workload.data.synthetic import synthetic_data as speed_data  # noqa: E402
from workload.training.presets import PACKED_SEED, PRESETS  # noqa: E402

GEMMA_2B = dict(
    vocab_size=256000,
    hidden_size=2048,
    intermediate_size=16384,
    num_hidden_layers=18,
    num_attention_heads=8,
    num_key_value_heads=1,
    head_dim=256,
)
# Gemma 4 text decoder at transformers' Gemma4TextConfig defaults, which its docstring calls similar to
# google/gemma-4-e2b-it (hidden 2304, 30 layers, 8 heads, 4 KV heads, head_dim 256, intermediate 9216, vocab 262144,
# 256-wide per-layer inputs, sliding window 512); the released checkpoint's config was not reachable to compare.
GEMMA4_E2B = dict(family="gemma4_text")
TINY_GEMMA4 = dict(
    family="gemma4_text",
    vocab_size=1000,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=16,
    global_head_dim=16,
    hidden_size_per_layer_input=16,
    vocab_size_per_layer_input=1000,
    sliding_window=128,
    layer_types=["sliding_attention", "full_attention"],
)
TINY = dict(
    vocab_size=1000,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=16,
)
PAD, EOS, BOS = 0, 1, 2
NUM_LABELS = 7


def model_shape(name: str, tiny: bool) -> dict:
    """The config fields of a --shape (gemma-2b | gemma4-e2b), or of that family's tiny CPU model."""
    return {
        ("gemma-2b", False): GEMMA_2B,
        ("gemma-2b", True): TINY,
        ("gemma4-e2b", False): GEMMA4_E2B,
        ("gemma4-e2b", True): TINY_GEMMA4,
    }[name, tiny]


def synthetic_data(n: int, vocab: int, seed: int) -> tuple[list[list[int]], list[int]]:
    """The speed preset's data (workload/data/synthetic.py): log-normal lengths, the label planted as class tokens."""
    return speed_data(n, vocab, seed, num_labels=NUM_LABELS)


def length_stats(ids) -> dict:
    lengths = sorted(len(x) for x in ids)
    return {
        "median": lengths[len(lengths) // 2],
        "mean": round(sum(lengths) / len(lengths), 1),
        "p95": lengths[int(0.95 * len(lengths))],
        "max": lengths[-1],
    }


class _Gemma4Classifier(LastTokenClassifier):
    """The workload's Gemma 4 head, plus the loss HF Trainer needs when labels are passed (baseline only)."""

    def forward(self, input_ids, attention_mask=None, labels=None, **_):
        out = super().forward(input_ids, attention_mask)
        if labels is not None:
            out.loss = F.cross_entropy(out.logits.float(), labels)
        return out


def build_model(shape: dict, device, seed: int, dtype: str):
    ids = dict(pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS)
    torch.manual_seed(seed)
    if shape.get("family") == "gemma4_text":
        from transformers import Gemma4TextConfig, Gemma4TextModel

        config = Gemma4TextConfig(**{k: v for k, v in shape.items() if k != "family"}, **ids)
        with torch.device(device):
            model = _Gemma4Classifier(Gemma4TextModel._from_config(config, attn_implementation="sdpa"), NUM_LABELS)
        return model.to(env.TORCH_DTYPES[dtype])
    from transformers import GemmaConfig, GemmaForSequenceClassification

    config = GemmaConfig(**shape, num_labels=NUM_LABELS, **ids)
    with torch.device(device):
        model = GemmaForSequenceClassification._from_config(config, attn_implementation="sdpa")
    return model.to(env.TORCH_DTYPES[dtype])


class _Rows(torch.utils.data.Dataset):
    def __init__(self, ids, labels):
        self.ids, self.labels = ids, labels

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def _pad_to_longest(rows):
    """What DataCollatorWithPadding does: pad each batch to its longest row."""
    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r["input_ids"])] = torch.tensor(r["input_ids"])
        mask[i, : len(r["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([r["labels"] for r in rows])}


def length_grouping() -> dict:
    """TrainingArguments' switch for LengthGroupedSampler in the installed transformers: `group_by_length=True`
    until 5.x named it `train_sampling_strategy="group_by_length"`."""
    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    if "train_sampling_strategy" in names:
        return {"train_sampling_strategy": "group_by_length"}
    if "group_by_length" in names:
        return {"group_by_length": True}
    raise RuntimeError("this transformers' TrainingArguments has no length grouping")


def run_baseline(shape, data: Tokenised, recipe, device, steps: int, tuned: bool = False) -> dict:
    """The plain HF Trainer + peft run; `tuned`: with transformers' length grouping (the tuned HF anchor)."""
    from peft import LoraConfig, TaskType, get_peft_model
    from transformers import Trainer, TrainingArguments

    model = get_peft_model(
        build_model(shape, device, recipe.seed, recipe.dtype),
        LoraConfig(
            task_type=TaskType.SEQ_CLS,
            r=recipe.lora_r,
            lora_alpha=recipe.lora_alpha,
            lora_dropout=recipe.lora_dropout,
            target_modules=list(recipe.target_modules),
        ),
    )
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            per_device_train_batch_size=recipe.batch_size,
            learning_rate=recipe.learning_rate,
            warmup_steps=recipe.warmup_steps,
            weight_decay=recipe.weight_decay,
            max_steps=steps,
            bf16=device.type == "cuda",
            use_cpu=device.type == "cpu",
            logging_steps=10,
            save_strategy="no",
            report_to=[],
            seed=recipe.seed,
            remove_unused_columns=False,
            disable_tqdm=True,
            **(length_grouping() if tuned else {}),
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=_Rows(data.train_ids, data.train_labels),
            data_collator=_pad_to_longest,
        )
        _reset_memory(device)
        start = time.perf_counter()
        trainer.train()
        _sync(device)
        seconds = time.perf_counter() - start
    used = steps * recipe.batch_size
    tokens = sum(len(x) for x in data.train_ids[:used])
    attn = attention_flops([len(x) for x in data.train_ids[:used]], attention_layers(model))
    return _report(
        "hf_anchor_group_by_length" if tuned else "hf_trainer_baseline",
        model,
        data,
        recipe,
        device,
        seconds,
        used,
        tokens,
        steps,
        attn,
        extra={"optim": str(args.optim)},
    )


def run_workload(shape, data: Tokenised, recipe, device, steps: int, name: str, profile_steps: int = 0) -> dict:
    """One workload run; `profile_steps`: then, after its eval, that many more steps under torch.profiler (the
    first of them, and the warm-up passes before it, left out) for where the step's time goes."""
    model = apply_lora(
        build_model(shape, device, recipe.seed, recipe.dtype),
        recipe.lora_r,
        recipe.lora_alpha,
        recipe.lora_dropout,
        recipe.target_modules,
    )
    make_trainable_fp32(model)
    _reset_memory(device)
    stats = train(model, data, recipe.replace(max_steps=steps, epochs=1), device=device, dtype=recipe.dtype, pad_id=PAD)
    levers = {
        k: getattr(recipe, k)
        for k in (
            "micro_batch_tokens",
            "tokens_per_step",
            "bucket_lengths",
            "pack",
            "pack_length",
            "pack_samples",
            "compile",
            "lr_scaling",
            "graph_steps",
            "varlen_attention",
            "merged_qkv",
            "lora_dropout",
        )
    }
    out = _report(
        name,
        model,
        data,
        recipe,
        device,
        stats.seconds,
        stats.samples,
        stats.tokens,
        stats.steps,
        stats.attention_flops,
        extra={
            "final_train_loss": stats.train_loss[-1][1],
            "padded_tokens": stats.padded_tokens,
            "warmup_seconds": round(stats.warmup_seconds, 1),
            "learning_rate": stats.learning_rate,
            "warmup_steps": stats.warmup_steps,
            "compile_error": stats.compile_error,
            "graph_error": stats.graph_error,
            "graphed_layouts": stats.graphed_layouts,
            "memory_peaks": {
                phase: {"allocated_gb": round(allocated / 1e9, 2), "reserved_gb": round(reserved / 1e9, 2)}
                for phase, (allocated, reserved) in stats.memory_peaks.items()
            },
            "compiled_layers": stats.compiled_layers,
            "first_losses": stats.train_loss[:4],
            "varlen_attention": stats.varlen_attention,
            "varlen_error": stats.varlen_error,
            "merged_qkv_blocks": stats.merged_qkv_blocks,
            "levers": levers,
        },
    )
    if profile_steps:
        try:
            out["profile"] = profile_run(model, data, recipe, device, profile_steps)
        except Exception as e:  # noqa: BLE001 - the run's numbers stand; the profile's failure is recorded
            out["profile"] = {"error": f"{type(e).__name__}: {e}"[:2000]}
            print(f"profile failed: {out['profile']['error'][:300]}", flush=True)
    return out


def profile_run(model, data: Tokenised, recipe, device, steps: int) -> dict:
    """Kernel time by kind, the top kernels and the GEMMs by shape (bench/step_profile.py's breakdown) over steps 2 to
    `steps` + 1 of another train() of the same model, recipe and data; GPU busy = kernel time / wall time."""
    from step_profile import kernel_time, profiled_train

    stats, wall, prof = profiled_train(model, data, recipe, device, recipe.dtype, steps + 1)
    out = {"profiled_steps": stats.steps - 1, "wall_seconds": round(wall, 4), **kernel_time(prof, wall)}
    print(
        f"profile of {out['profiled_steps']} steps: GPU busy {(out['gpu_busy_fraction'] or 0) * 100:.1f} %", flush=True
    )
    for kind, row in out["by_kind"].items():
        print(f"  {kind:<50}{row['seconds']:>9.3f} s{(row['share'] or 0) * 100:>7.1f} %", flush=True)
    for row in out["gemm_by_shape"][:8]:
        print(f"  {row['op']} {row['m_k_n']}: {row['calls']} calls, {row['seconds']} s, {row['tflops']} TFLOP/s")
    return out


#: The seed preset with one lever changed, each run after it in this order (--variants).
SEED_VARIANTS = {
    "seed_packed": PACKED_SEED,  # the seed preset's steps packed padding-free
    "seed_packed_1536": {**PACKED_SEED, "pack_samples": tuple(w for w in PACKED_SEED["pack_samples"] if w <= 1536)},
    "seed_eager": {"compile": False, "graph_steps": False},  # without compiled layers (nor graphs)
    "seed_nographs": {"graph_steps": False},
}
#: The throughput preset with one lever changed, each run after it in this order (--variants).
THROUGHPUT_VARIANTS = {
    "throughput_masked": {"varlen_attention": False},  # packed rows through dense per-row masks
    "throughput_varlen": {"varlen_attention": True},
    "throughput_nodropout": {"lora_dropout": 0.0},  # the ceiling of removing dropout's copies
    "throughput_unmerged": {"merged_qkv": False},  # peft's three q/k/v projections (three dropout masks)
}
#: The throughput preset compiled with other inductor settings (torch._inductor.config), each after it (--variants).
INDUCTOR_VARIANTS = {
    "throughput_cdt": {"coordinate_descent_tuning": True},
}
#: The issue's goals, each read off one run of this script.
GOALS = {"gemma2b_mfu": 0.55, "gemma4_mfu": 0.45, "throughput_over_anchor": 12.0, "seed_over_baseline": 8.0}
SEED_MEMORY_GB = 9.8


def attempt(run, *args) -> dict:
    """One benchmark run; a failure is recorded (and the next run goes on), never hidden."""
    name = next((a for a in reversed(args) if isinstance(a, str)), run.__name__)
    try:
        return run(*args)
    except Exception as e:  # noqa: BLE001 - reported in the output
        print(
            json.dumps(
                {
                    "name": name,
                    "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                }
            ),
            flush=True,
        )
        return {
            "name": name,
            "error": f"{type(e).__name__}: {e}"[:2000],
        }
    finally:
        import torch._dynamo

        torch._dynamo.reset()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _report(name, model, data, recipe, device, seconds, samples, tokens, steps, attn_flops, extra) -> dict:
    """One run's numbers. `mfu` counts 4 x non-embedding parameters FLOPs per non-pad token (the targets' definition);
    `mfu_with_attention` adds the attention-score FLOPs (PaLM appendix B: 12 x layers x heads x head_dim x the
    sample's length per token) for comparison with reports that count them."""
    peak = (
        (torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device))
        if device.type == "cuda"
        else (None, None)
    )
    ev = evaluate(
        model,
        data.eval_ids,
        data.eval_labels,
        device=device,
        dtype=recipe.dtype,
        pad_id=PAD,
        recipe=recipe,
        num_labels=NUM_LABELS,
    )
    n_non_embedding = count_parameters(model)[2]
    peak_tflops = env.hardware(device)["peak_tflops"] if device.type == "cuda" else None
    rate = mfu(tokens / seconds, n_non_embedding, peak_tflops)
    rate_attn = mfu_from_flops((tokens * flops_per_token(n_non_embedding) + attn_flops) / seconds, peak_tflops)
    out = {
        "name": name,
        "steps": steps,
        "samples": samples,
        "seconds": round(seconds, 3),
        "samples_per_s": round(samples / seconds, 2),
        "tokens_per_s": round(tokens / seconds, 1),
        "mfu": round(rate, 4) if rate is not None else None,
        "mfu_with_attention": round(rate_attn, 4) if rate_attn is not None else None,
        "peak_allocated_gb": round(peak[0] / 1e9, 2) if peak[0] else None,
        "peak_reserved_gb": round(peak[1] / 1e9, 2) if peak[1] else None,
        "eval_loss": round(ev["loss"], 4),
        "eval_accuracy": round(ev["accuracy"], 4),
        **extra,
    }
    print(json.dumps(out), flush=True)
    del model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def _reset_memory(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def spread(values: list[float]) -> dict:
    """Median, min, max and (max - min) / median of a few runs' samples/s."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {
        "runs": [round(v, 2) for v in values],
        "median": round(median, 2),
        "min": round(ordered[0], 2),
        "max": round(ordered[-1], 2),
        "spread": round((ordered[-1] - ordered[0]) / median, 3) if median else None,
    }


def run_anchors(bench: Bench, n: int) -> None:
    """The tuned HF anchor `n` times, each in its own process (its own CUDA start-up, untimed warm-up steps first,
    then `--anchor-steps` timed ones), one after the other on the same device."""
    args = bench.args
    for k in range(n):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "anchor.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--anchor", "--shape", args.shape]
            cmd += ["--steps", str(args.anchor_steps or args.steps), "--warmup", str(args.anchor_warmup)]
            cmd += ["--eval-samples", str(args.eval_samples), "--out", str(path)] + (["--tiny"] if args.tiny else [])
            print(f"tuned HF anchor, run {k + 1} of {n} (its own process):", flush=True)
            bench.say(f"start hf_anchor_group_by_length {k + 1}/{n}")
            begin = time.perf_counter()
            proc = subprocess.run(cmd, check=False)
            if proc.returncode or not path.exists():
                run = {"name": "hf_anchor_group_by_length", "error": f"anchor process exited {proc.returncode}"}
            else:
                run = json.loads(path.read_text())
                run["process_seconds"] = round(time.perf_counter() - begin, 1)
            bench.anchors.append(run)
            bench.save()
            bench.say(
                f"end hf_anchor_group_by_length {k + 1}/{n} after {time.perf_counter() - begin:.1f} s: {outcome(run)}"
            )


def anchor_main(args, shape, data, recipe, device) -> int:
    """--anchor: one tuned HF anchor run (after `--warmup` untimed steps of another one), written to --out."""
    if args.warmup:
        print("anchor warm-up (not counted):", flush=True)
        attempt(run_baseline, shape, data, recipe, device, args.warmup, True)
    run = attempt(run_baseline, shape, data, recipe, device, args.steps, True)
    if args.out:
        write_json(args.out, run)
    return 1 if "error" in run else 0


def gemma4_inputs(args, dtype, eval_n: int) -> tuple[dict, Tokenised, object]:
    """(shape, data, recipe) of the throughput preset on the Gemma 4 E2B shape (or its tiny CPU model)."""
    shape = model_shape("gemma4-e2b", args.tiny)
    vocab = shape.get("vocab_size", 262144)
    recipe = PRESETS["throughput"].replace(dtype=dtype, log_every=50)
    if args.tiny:
        recipe = recipe.replace(tokens_per_step=2048, pack_length=512, micro_batch_tokens=1024)
    ids, labels = synthetic_data(args.gemma4_steps * (recipe.tokens_per_step // 68 + 1), vocab, seed=3)
    eval_ids, eval_labels = synthetic_data(eval_n, vocab, seed=2)
    return shape, Tokenised(ids, labels, eval_ids, eval_labels), recipe


def goals(runs: list[dict], anchor: dict | None) -> list[dict]:
    """The issue's four goals against this run's numbers: met, missed, or not measured (a run left out or failed).
    The seed goal is also read off each packed seed variant that ran (the candidates for the seed preset)."""
    by = {r["name"]: r for r in runs if "error" not in r}
    base, seed = by.get("hf_trainer_baseline"), by.get("workload_seed")
    fast, g4 = by.get("workload_throughput"), by.get("gemma4_throughput")
    rows = [
        ("gemma-2b throughput MFU", fast and fast["mfu"], GOALS["gemma2b_mfu"], "{:.1%}", None),
        ("Gemma 4 E2B throughput MFU", g4 and g4["mfu"], GOALS["gemma4_mfu"], "{:.1%}", None),
        (
            "throughput / tuned HF anchor (median)",
            fast and anchor and fast["samples_per_s"] / anchor["median"],
            GOALS["throughput_over_anchor"],
            "{:.2f}x",
            None,
        ),
    ]
    candidates = [("seed", seed)] + [
        (f"seed as {name.removeprefix('workload_')}", run)
        for name, run in by.items()
        if name.startswith("workload_seed_packed")
    ]
    for label, run in candidates:
        value = run and base and run["samples_per_s"] / base["samples_per_s"]
        rows.append(
            (f"{label} / plain baseline, at <= {SEED_MEMORY_GB} GB", value, GOALS["seed_over_baseline"], "{:.2f}x", run)
        )
    out = []
    for name, value, target, fmt, memory_bound in rows:
        met = None if value is None else value >= target
        if met and memory_bound and (memory_bound["peak_allocated_gb"] or 0) > SEED_MEMORY_GB:
            met = False
        out.append(
            {
                "goal": name,
                "value": None if value is None else round(value, 4),
                "target": target,
                "met": met,
                "shown": "not measured" if value is None else fmt.format(value),
            }
        )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200, help="optimizer steps per run (16 samples each)")
    p.add_argument("--eval-samples", type=int, default=512)
    p.add_argument("--shape", choices=["gemma-2b", "gemma4-e2b"], default="gemma-2b", help="model shape")
    p.add_argument("--tiny", action="store_true", help="tiny model of that family (a quick check, e.g. on CPU)")
    p.add_argument(
        "--variants",
        default="seed_eager,throughput_eager",
        help="extra runs, comma-separated: seed_packed, seed_packed_1536, seed_eager, seed_nographs, throughput_eager, "
        "throughput_masked, throughput_varlen, throughput_nodropout, throughput_unmerged, throughput_cdt ('' for none)",
    )
    p.add_argument(
        "--no-seed",
        action="store_true",
        help="leave the seed preset out (the ratio is then the first remaining workload run's)",
    )
    p.add_argument("--throughput-steps", type=int, default=60, help="optimizer steps of the throughput preset")
    p.add_argument(
        "--warmup",
        type=int,
        default=30,
        help="untimed baseline steps first, so no measured run pays for CUDA/cuBLAS start-up",
    )
    p.add_argument("--loss-tolerance", type=float, default=0.05, help="max |eval loss difference| (absolute)")
    p.add_argument("--anchor-runs", type=int, default=0, help="tuned HF anchor runs, each in its own process")
    p.add_argument("--anchor-steps", type=int, help="timed steps of each anchor run (default: --steps)")
    p.add_argument("--anchor-warmup", type=int, default=10, help="untimed steps first in each anchor process")
    p.add_argument("--anchor", action="store_true", help=argparse.SUPPRESS)  # one anchor run (the child process)
    p.add_argument("--no-baseline", action="store_true", help="leave the plain HF baseline out (lever runs only)")
    p.add_argument("--gemma4-steps", type=int, default=0, help="also the throughput preset on Gemma 4 E2B")
    p.add_argument(
        "--profile-steps", type=int, default=0, help="then profile this many steps of each throughput run (kernels)"
    )
    p.add_argument("--out", type=Path, help="write the numbers as JSON here")
    args = p.parse_args(argv)
    variants = set(args.variants.split(",")) if args.variants else set()
    unknown = variants - set(SEED_VARIANTS) - set(THROUGHPUT_VARIANTS) - set(INDUCTOR_VARIANTS) - {"throughput_eager"}
    if unknown:
        p.error(f"unknown --variants: {', '.join(sorted(unknown))}")

    device = env.pick_device("auto")
    dtype = "bf16" if device.type == "cuda" else "fp32"
    recipe = PRESETS["seed"].replace(dtype=dtype, log_every=50)
    shape = model_shape(args.shape, args.tiny)
    vocab = shape.get("vocab_size", 262144)
    n = args.steps * recipe.batch_size
    train_ids, train_labels = synthetic_data(n, vocab, seed=1)
    eval_ids, eval_labels = synthetic_data(args.eval_samples, vocab, seed=2)
    data = Tokenised(train_ids, train_labels, eval_ids, eval_labels)
    header = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "versions": env.versions(),
        "shape": shape,
        "dtype": dtype,
        "lengths": length_stats(train_ids),
        "steps": args.steps,
        "batch_size": recipe.batch_size,
    }
    if args.anchor:
        return anchor_main(args, shape, data, recipe, device)
    print(json.dumps(header), flush=True)

    bench = Bench(args, header)
    if args.anchor_runs:
        run_anchors(bench, args.anchor_runs)
    if not args.no_baseline:
        if args.warmup:
            bench.run(
                "baseline warm-up (not counted)", run_baseline, shape, data, recipe, device, args.warmup, counted=False
            )
        bench.run("hf_trainer_baseline", run_baseline, shape, data, recipe, device, args.steps)
    if not args.no_seed:
        bench.run("workload_seed", run_workload, shape, data, recipe, device, args.steps, "workload_seed")
    for variant, changes in SEED_VARIANTS.items():
        if variant in variants:
            name = f"workload_{variant}"
            bench.run(name, run_workload, shape, data, dataclasses.replace(recipe, **changes), device, args.steps, name)
    throughput = PRESETS["throughput"].replace(dtype=dtype, log_every=50)
    if args.tiny:
        throughput = throughput.replace(tokens_per_step=2048, pack_length=512, micro_batch_tokens=1024)
    per_step = throughput.tokens_per_step // 68 + 1
    t_ids, t_labels = synthetic_data(args.throughput_steps * per_step, vocab, seed=3)
    t_data = Tokenised(t_ids, t_labels, eval_ids, eval_labels)
    t_steps = args.throughput_steps
    if "throughput_eager" in variants:
        name = "workload_throughput_eager"
        bench.run(name, run_workload, shape, t_data, throughput.replace(compile=False), device, t_steps, name)
    bench.run(
        "workload_throughput",
        run_workload,
        shape,
        t_data,
        throughput,
        device,
        t_steps,
        "workload_throughput",
        args.profile_steps,
    )
    if args.gemma4_steps:  # before the lever variants: a run cut short by a time limit still has both shapes
        g4_shape, g4_data, g4_recipe = gemma4_inputs(args, dtype, args.eval_samples)
        name = "gemma4_throughput"
        bench.run(name, run_workload, g4_shape, g4_data, g4_recipe, device, args.gemma4_steps, name, args.profile_steps)
    for variant, changes in THROUGHPUT_VARIANTS.items():
        if variant in variants:
            name = f"workload_{variant}"
            bench.run(
                name, run_workload, shape, t_data, dataclasses.replace(throughput, **changes), device, t_steps, name
            )
    for variant, options in INDUCTOR_VARIANTS.items():
        if variant in variants:
            from torch._inductor import config as inductor_config

            name = f"workload_{variant}"
            with inductor_config.patch(**options):
                run = bench.run(name, run_workload, shape, t_data, throughput, device, t_steps, name)
            run["inductor"] = options
            bench.save()
    return report(bench)


def write_json(path: Path, data: dict) -> None:
    """`data` into `path` whole or not at all (a temporary file beside it, then renamed over it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def outcome(run: dict) -> str:
    """A finished run in a few words: its samples/s and peak memory, or its error."""
    if "error" in run:
        return f"FAILED: {run['error'][:200]}"
    peak = f", peak allocated {run['peak_allocated_gb']} GB" if run.get("peak_allocated_gb") is not None else ""
    return f"{run['samples_per_s']} samples/s{peak}"


class Bench:
    """The runs of one bench session: a progress line as each starts and ends (with the time since the session
    began), and --out rewritten after each (a session stopped part-way keeps every finished run's numbers)."""

    def __init__(self, args, header: dict):
        self.args, self.header = args, header
        self.anchors: list[dict] = []
        self.runs: list[dict] = []
        self.begin = time.perf_counter()

    def say(self, text: str) -> None:
        print(f"[bench +{time.perf_counter() - self.begin:.1f} s] {text}", flush=True)

    def run(self, label: str, run, *run_args, counted: bool = True) -> dict:
        """`attempt(run, *run_args)`; a `counted` run joins the runs and --out."""
        self.say(f"start {label}")
        begin = time.perf_counter()
        result = attempt(run, *run_args)
        if counted:
            self.runs.append(result)
            self.save()
        self.say(f"end {label} after {time.perf_counter() - begin:.1f} s: {outcome(result)}")
        return result

    def save(self, summary: dict | None = None) -> None:
        """The runs so far into --out, marked partial until the summary comes."""
        if self.args.out:
            tail = {"summary": summary} if summary is not None else {"partial": True}
            write_json(self.args.out, {"header": self.header, "anchors": self.anchors, "runs": self.runs, **tail})


def report(bench: Bench) -> int:
    """The table, the ratios to the baseline and the anchor, the goals; --out gets all of it as JSON."""
    args, runs, anchors = bench.args, bench.runs, bench.anchors
    fine = [a for a in anchors if "error" not in a]
    anchor = spread([a["samples_per_s"] for a in fine]) if fine else None
    base = runs[0] if runs and runs[0]["name"] == "hf_trainer_baseline" else None
    reference = base if base and "error" not in base else None
    summary: dict = {"anchor": anchor, "goals": goals(runs, anchor)}
    if reference:
        summary["ratios"] = {
            r["name"]: round(r["samples_per_s"] / reference["samples_per_s"], 3) for r in runs if "error" not in r
        }
        summary["eval_loss_diffs"] = {
            r["name"]: round(abs(r["eval_loss"] - reference["eval_loss"]), 4)
            for r in runs
            if "error" not in r and r["name"].startswith("workload")
        }
        summary["eval_losses_within_tolerance"] = all(
            d <= args.loss_tolerance for d in summary["eval_loss_diffs"].values()
        )
    if anchor:
        summary["ratios_to_anchor_median"] = {
            r["name"]: round(r["samples_per_s"] / anchor["median"], 3) for r in runs if "error" not in r
        }
    print()
    head = (
        f"{'run':<34}{'samples/s':>11}{'tokens/s':>11}{'MFU':>8}{'MFU+attn':>9}{'peak alloc GB':>15}"
        f"{'reserved GB':>13}{'eval loss':>11}"
    )
    print(head + (f"{'x base':>8}" if reference else "") + (f"{'x anchor':>10}" if anchor else ""))
    for r in anchors + runs:
        if "error" in r:
            print(f"{r['name']:<34} FAILED: {r['error'][:200]}")
            continue
        line = (
            f"{r['name']:<34}{r['samples_per_s']:>11.1f}{r['tokens_per_s']:>11.0f}{(r['mfu'] or 0) * 100:>7.1f}%"
            f"{(r['mfu_with_attention'] or 0) * 100:>8.1f}%{(r['peak_allocated_gb'] or 0):>15.2f}"
            f"{(r.get('peak_reserved_gb') or 0):>13.2f}{r['eval_loss']:>11.4f}"
        )
        if reference:
            line += f"{r['samples_per_s'] / reference['samples_per_s']:>7.2f}x"
        if anchor:
            line += f"{r['samples_per_s'] / anchor['median']:>9.2f}x"
        print(line)
    for r in runs:
        if r.get("memory_peaks") or r.get("graphed_layouts"):
            phases = ", ".join(
                f"{phase} {m['allocated_gb']:.2f}/{m['reserved_gb']:.2f}" for phase, m in r["memory_peaks"].items()
            )
            print(
                f"{r['name']}: {r['graphed_layouts']} step layouts captured; peak allocated/reserved GB after "
                f"{phases or '(no GPU)'}"
            )
    if anchor:
        print(
            f"tuned HF anchor: median {anchor['median']:.1f} samples/s over {len(fine)} runs "
            f"(min {anchor['min']:.1f}, max {anchor['max']:.1f}, spread {anchor['spread'] * 100:.1f} % of the median)"
        )
    if reference:
        print(
            "eval loss diff to the baseline: "
            + ", ".join(f"{k} {v:.4f}" for k, v in summary["eval_loss_diffs"].items())
            + f" ({'all within' if summary['eval_losses_within_tolerance'] else 'NOT all within'} "
            f"tolerance {args.loss_tolerance})"
        )
    print(f"\n{'goal':<56}{'measured':>14}{'target':>9}  verdict")
    for g in summary["goals"]:
        verdict = "not measured" if g["met"] is None else "met" if g["met"] else "MISSED"
        print(f"{g['goal']:<56}{g['shown']:>14}{g['target']:>9}  {verdict}")
    bench.save(summary)
    failed = [r["name"] for r in anchors + runs if "error" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
