"""Training recipes: `seed` (the reference LoRA recipe) and `smoke` (tiny model, CPU, under a minute)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

EMOTIONS = ("anger", "disgust", "fear", "joy", "neutral", "sadness", "surprise")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


@dataclass(frozen=True)
class Recipe:
    """Every knob of one training run; `preset` names where the defaults came from."""

    preset: str
    model: str
    lora_r: int
    lora_alpha: int
    lora_dropout: float
    learning_rate: float
    batch_size: int
    epochs: int
    max_length: int
    warmup_steps: int
    weight_decay: float
    labels: tuple[str, ...] | None = EMOTIONS  # None: take the label set from the data
    target_modules: tuple[str, ...] = LORA_TARGETS
    train_embeddings: bool = False  # also train the input embeddings in full (tiny random models only need it)
    seed: int = 42
    dtype: str = "auto"  # auto | fp32 | bf16 | fp16
    attn_implementation: str | None = None  # None: transformers' choice (sdpa where the family allows)
    gradient_checkpointing: bool = False
    eval_fraction: float = 0.2
    pad_multiple: int = 64  # pad batch lengths to a multiple: few distinct shapes
    bucket_batches: int = 50  # length-sort within windows of this many batches
    max_grad_norm: float = 1.0
    min_accuracy: float | None = (
        None  # the pass bar given with --min-accuracy; None: the rule (workload/training/pass_bar.py)
    )
    accuracy_floor: float = 0.0  # the preset's own lowest bar; the rule's bar applies when it is higher
    max_steps: int | None = None
    untimed_steps: int = 0  # optimizer steps before the timing starts (samples/s, tokens/s and MFU count the rest)
    log_every: int = 10
    # Speed levers (docs/workload.md, "Training speed"); all off in the plain path.
    micro_batch_tokens: int | None = None  # cap padded tokens per forward: gradient accumulation inside a step
    tokens_per_step: int | None = None  # a token budget per optimizer step instead of `batch_size` samples
    bucket_lengths: tuple[int, ...] | None = None  # with tokens_per_step: pad to these lengths (few shapes)
    pack: bool = False  # with tokens_per_step and no buckets: padding-free rows of `pack_length` tokens
    pack_length: int = 1024
    lr_scaling: str = "none"  # none | sqrt | linear in the mean samples per step relative to `batch_size`
    compile: bool = False  # torch.compile each decoder layer (static shapes; warm-up excluded from timing)
    graph_steps: bool = False  # GPUs, padded steps: replay each step layout's whole step as one captured graph
    varlen_attention: bool = False  # GPUs, packed rows: varlen attention kernels instead of dense per-row masks
    # Steps of `batch_size` samples (no tokens_per_step), packed padding-free: each micro-batch one row of whole
    # samples, padded to the smallest of these widths (the largest caps a micro-batch). With varlen_attention, only
    # where the varlen kernels run and in one process; elsewhere the same steps run padded (`bucket_lengths`).
    pack_samples: tuple[int, ...] | None = None
    merged_qkv: bool = False  # one base GEMM and one LoRA-A GEMM for q/k/v (one dropout mask shared by the three)

    def replace(self, **changes) -> "Recipe":
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def lora_dict(self) -> dict:
        return {
            "r": self.lora_r,
            "alpha": self.lora_alpha,
            "dropout": self.lora_dropout,
            "target_modules": list(self.target_modules),
        }


PRESETS = {
    # The reference recipe of the product brief: LoRA r=64/alpha=16/dropout 0.1 on q/k/v/o, full head, lr 2e-4,
    # batch 16, 3 epochs, max length 512, warmup 100, weight decay 0.01, 7 emotion classes.
    "seed": Recipe(
        preset="seed",
        model="google/gemma-2b",
        lora_r=64,
        lora_alpha=16,
        lora_dropout=0.1,
        learning_rate=2e-4,
        batch_size=16,
        epochs=3,
        max_length=512,
        warmup_steps=100,
        weight_decay=0.01,
        # Speed levers that keep the recipe's 16 samples per step: batches padded to 64/128/256/512
        # tokens (few shapes), a step over 4096 padded tokens run as micro-batches (gradient
        # accumulation inside the step: the same update up to rounding; it also caps peak memory),
        # decoder layers compiled on GPUs (one graph per micro-batch shape: (16,64) (16,128) (8,256)
        # (4,512)), and each step layout's whole step replayed as one captured device graph on GPUs.
        bucket_lengths=(64, 128, 256, 512),
        micro_batch_tokens=2048,
        compile=True,
        graph_steps=True,
    ),
    # Tiny random-initialised Gemma on CPU: proves the pipeline end to end and that it learns, in seconds.
    # Its random embeddings carry no meaning, so they are trained too (LoRA alone on random features
    # memorises the training texts and generalises poorly).
    "smoke": Recipe(
        preset="smoke",
        model="tiny-gemma",
        lora_r=8,
        lora_alpha=16,
        lora_dropout=0.1,
        learning_rate=1e-2,
        batch_size=16,
        epochs=6,
        max_length=64,
        warmup_steps=10,
        weight_decay=0.01,
        dtype="fp32",
        pad_multiple=8,
        train_embeddings=True,
        accuracy_floor=0.45,
        log_every=6,
    ),
}

# `throughput`: a token budget per optimizer step (32 packed rows of 512 tokens, run as 2 micro-batches of
# 16 rows; a few hundred samples of ~68 tokens) instead of 16 samples, padding-free, layers compiled. Rows of
# 512 (the recipe's max_length) rather than 1024 halve the attention work of the masked kernels: +6 % samples/s
# on the gemma-2b shape, +18 % on the Gemma 4 E2B shape (H200, docs/workload.md). The learning rate scales with the
# square root of the samples per step relative to the seed recipe's 16 (lr = 2e-4 * sqrt(mean samples per step
# / 16)), and warmup keeps the seed recipe's warmup in samples (100 steps * 16 samples), both computed from
# the epoch's schedule at run time. On GPUs the packed rows go through varlen attention kernels (each sample
# attends to its own tokens; no dense row x row mask is built or computed: workload/training/varlen.py). q/k/v run as one
# base GEMM and one LoRA-A GEMM per layer, with one LoRA dropout mask shared by the three (workload/training/merged_qkv.py).
PRESETS["throughput"] = dataclasses.replace(
    PRESETS["seed"],
    preset="throughput",
    tokens_per_step=16384,
    bucket_lengths=None,
    pack=True,
    pack_length=512,
    micro_batch_tokens=8192,
    lr_scaling="sqrt",
    compile=True,
    graph_steps=False,
    varlen_attention=True,
    merged_qkv=True,
)

#: The seed preset's steps packed padding-free (`pack_samples`, with varlen attention): each step's 16 samples in one
#: row (two for the few steps over 2048 tokens) padded to a multiple of 256 up to 1024, then 1536 or 2048 (6 widths
#: to compile; 86 % real tokens on the speed data against 61 % padded to 64/128/256/512). Not in the seed preset: on an
#: H100 it ran 11.6x the HF baseline but peaked at 10.9 GB, over the preset's 9.8 (docs/benchmarks.md).
PACKED_SEED = dict(pack_samples=(256, 512, 768, 1024, 1536, 2048), varlen_attention=True)

# `speed`: the standard speed measurement of a cell (docs/workload.md "The speed preset"), the same on every GPU.
# A random-weight classifier of a real model's shape (`--model gemma-2b-shape`, or `gemma4-e2b-shape`;
# workload/model/shapes.py: nothing is downloaded) on synthetic variable-length data whose label is planted as
# class tokens (workload/data/synthetic.py: a model that trains correctly learns it, so the eval accuracy must rise
# past the pass bar), the throughput preset's levers, bf16 where the device has it, 10 untimed steps (after the
# compile warm-up) and then 40 timed ones, seed 0. Its samples/s, tokens/s, MFU and peak memory are the cell's speed.
SPEED_LABELS = tuple(f"class{k}" for k in range(7))
PRESETS["speed"] = dataclasses.replace(
    PRESETS["throughput"],
    preset="speed",
    model="gemma-2b-shape",
    labels=SPEED_LABELS,
    epochs=1,
    max_steps=50,
    untimed_steps=10,
    seed=0,
    log_every=10,
)

#: The speed preset on the CPU test shape (the pipeline, not the hardware: 12 steps of 512 tokens in rows of 256,
#: samples of at most 256; too few steps for the tiny model to learn the data, so its tests pass --min-accuracy 0), the
#: smoke preset's learning rate and trained embeddings (a tiny random model learns nothing with LoRA alone).
SHAPE_CHANGES = {
    "tiny-shape": dict(
        tokens_per_step=512,
        micro_batch_tokens=512,
        pack_length=256,
        max_length=256,
        learning_rate=1e-2,
        lr_scaling="none",
        warmup_steps=2,
        train_embeddings=True,
        max_steps=12,
        untimed_steps=2,
        log_every=4,
    )
}


def preset_for(name: str, model: str | None = None) -> Recipe:
    """The preset `name` as it stands for `model` (the speed preset's CPU shape has its own step size)."""
    recipe = PRESETS[name]
    if name == "speed" and model in SHAPE_CHANGES:
        recipe = dataclasses.replace(recipe, model=model, **SHAPE_CHANGES[model])
    return recipe
