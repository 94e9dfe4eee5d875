"""The training loop: a plain PyTorch loop (no HF Trainer), device-agnostic, AMP, NaN guard, throughput."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import torch
import torch.nn.functional as F

from ..errors import NonFiniteLoss
from .batching import (
    bucket_length,
    collate,
    collate_packed,
    eval_batches,
    pack_sample_rows,
    packed_steps,
    padded_length,
    token_budget_batches,
    train_batches,
)
from .merged_qkv import merged_qkv_on
from .metrics import accuracy, attention_flops, attention_layers, macro_f1
from .presets import Recipe
from .speed import (
    COMPILE_NEEDS_GPU_ENV,
    COMPILE_UNAVAILABLE_ENV,
    compile_layers,
    packed_logits,
    packing_supported,
    uncompile_layers,
)
from .varlen import cu_seqlens, sequence_count, varlen_attention_on, varlen_available


@dataclass
class Tokenised:
    train_ids: list[list[int]]
    train_labels: list[int]
    eval_ids: list[list[int]]
    eval_labels: list[int]


@dataclass
class TrainStats:
    train_loss: list = field(default_factory=list)  # [[step, loss], ...]
    grad_norm: list = field(default_factory=list)
    steps: int = 0
    samples: int = 0
    tokens: int = 0  # non-pad
    padded_tokens: int = 0  # what the forwards processed, pad included
    seconds: float = 0.0
    warmup_seconds: float = 0.0  # compilation warm-up, outside `seconds`
    untimed_steps: int = 0  # optimizer steps run before the timing started (recipe.untimed_steps), outside `seconds`
    learning_rate: float = 0.0  # after lr_scaling
    warmup_steps: int = 0
    compiled_layers: int = 0  # decoder layers that ran compiled (0: eager, e.g. on the CPU)
    compile_error: str | None = None  # set when compiled layers were asked for but failed (the run went eager)
    graph_error: str | None = None  # set when graph_steps was asked for but could not be used (the run went on without)
    graphed_layouts: int = 0  # step layouts captured as device graphs (0: none)
    packed: bool = False  # packing ran (False when asked for but the installed transformers cannot mask it)
    varlen_attention: bool = False  # packed rows ran through varlen attention kernels (no dense masks)
    varlen_error: str | None = None  # set when varlen attention was asked for but could not be used (masks instead)
    merged_qkv_blocks: int = 0  # attention blocks whose q/k/v ran merged (workload.training.merged_qkv)
    attention_flops: float = 0.0  # attention-score FLOPs of the samples trained (metrics.attention_flops), global
    # GPUs: (torch.cuda.max_memory_allocated, max_memory_reserved) in bytes after each phase that ran ("compile
    # warm-up", "capture", "steps"); cumulative since the caller last reset the device's peak statistics
    memory_peaks: dict = field(default_factory=dict)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def autocast(device: torch.device, dtype: str):
    """Mixed precision for bf16/fp16 runs (weights may be half, trainable parameters stay fp32)."""
    if dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16 if dtype == "bf16" else torch.float16)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_optimizer(params, recipe: Recipe, device: torch.device, total_steps: int, capturable: bool = False):
    """AdamW (fused kernel on GPUs) with linear warmup then linear decay to zero, as HF's default schedule.
    `capturable`: state and learning rate live on the device (a tensor lr the schedule writes), so that the update
    can be captured in a device graph (`step_graphs`)."""
    kwargs = dict(lr=recipe.learning_rate, weight_decay=recipe.weight_decay)
    if device.type == "cuda":
        kwargs["fused"] = True
    if capturable:
        kwargs.update(capturable=True, lr=torch.tensor(recipe.learning_rate, device=device))
    optimizer = torch.optim.AdamW(params, **kwargs)
    warmup = recipe.warmup_steps

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@torch.no_grad()
def evaluate(
    model,
    ids: list[list[int]],
    labels: list[int],
    *,
    device: torch.device,
    dtype: str,
    pad_id: int,
    recipe: Recipe,
    num_labels: int,
) -> dict:
    """Accuracy, macro-F1 and mean loss on (ids, labels); leaves the model in train mode."""
    model.eval()
    preds, total_loss = [0] * len(ids), 0.0
    for batch in eval_batches([len(x) for x in ids], recipe.batch_size * 2):
        input_ids, mask = collate([ids[i] for i in batch], pad_id, recipe.pad_multiple, recipe.max_length)
        target = torch.tensor([labels[i] for i in batch], device=device)
        with autocast(device, dtype):
            logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device)).logits.float()
        total_loss += F.cross_entropy(logits, target, reduction="sum").item()
        for i, p in zip(batch, logits.argmax(-1).tolist()):
            preds[i] = p
    model.train()
    return {
        "accuracy": accuracy(preds, labels),
        "macro_f1": macro_f1(preds, labels, num_labels),
        "loss": total_loss / max(1, len(ids)),
    }


def _check_finite(stats: TrainStats, losses: list, norms: list, first_step: int, ctx: StepContext) -> None:
    loss_values = torch.stack(losses)
    if ctx.reduce_sum is not None:
        loss_values = ctx.reduce_sum(loss_values)  # each rank holds its share of the global-batch mean
    for offset, (loss, norm) in enumerate(zip(loss_values.tolist(), torch.stack(norms).tolist())):
        step = first_step + offset
        stats.train_loss.append([step, loss])
        stats.grad_norm.append([step, norm])
        # Under fp16 AMP an inf gradient norm is a skipped step (GradScaler lowers the scale); the loss must be finite.
        if not math.isfinite(loss) or (ctx.dtype != "fp16" and not math.isfinite(norm)):
            raise NonFiniteLoss(
                f"training diverged at step {step}: loss={loss}, grad_norm={norm} "
                "(lower the learning rate, or use bf16/fp32 instead of fp16)"
            )


@dataclass
class Step:
    """One optimizer step: its samples, and for packed steps the rows they are packed into."""

    samples: list[int]
    rows: list[list[int]] | None = None


def plan_epoch(lengths: list[int], recipe: Recipe, seed: int) -> list[Step]:
    """One epoch's optimizer steps: `batch_size` samples each (plain, or packed into rows with `pack_samples`),
    or a token budget per step, either bucketed by length (`bucket_lengths`) or packed into rows of `pack_length`
    tokens."""
    if recipe.varlen_attention and not (recipe.pack or recipe.pack_samples):
        raise ValueError("varlen_attention needs pack or pack_samples (it replaces the masks of packed rows)")
    if recipe.pack_samples:
        if recipe.pack or recipe.tokens_per_step:
            raise ValueError("pack_samples packs steps of batch_size samples: not with pack or tokens_per_step")
        if max(lengths, default=0) > recipe.max_length:
            raise ValueError(f"a sample of {max(lengths)} tokens is longer than max_length {recipe.max_length}")
        cap = max(recipe.pack_samples)
        return [
            Step(b, pack_sample_rows(lengths, b, cap))
            for b in train_batches(lengths, recipe.batch_size, seed=seed, bucket_batches=recipe.bucket_batches)
        ]
    if not recipe.tokens_per_step:  # bucket_lengths then only sets the padded widths
        if recipe.pack:
            raise ValueError("pack needs tokens_per_step (a token budget per optimizer step)")
        return [
            Step(b) for b in train_batches(lengths, recipe.batch_size, seed=seed, bucket_batches=recipe.bucket_batches)
        ]
    if recipe.bucket_lengths:
        if recipe.pack:
            raise ValueError("choose either pack or bucket_lengths, not both")
        return [
            Step(b) for b in token_budget_batches(lengths, recipe.tokens_per_step, recipe.bucket_lengths, seed=seed)
        ]
    if recipe.max_length > recipe.pack_length:
        raise ValueError(f"pack_length {recipe.pack_length} must be at least max_length {recipe.max_length}")
    rows_per_step = max(1, recipe.tokens_per_step // recipe.pack_length)
    return [
        Step([i for row in rows for i in row], rows)
        for rows in packed_steps(lengths, recipe.pack_length, rows_per_step, seed=seed)
    ]


def _pad_width(lengths: list[int], recipe: Recipe) -> int:
    longest = max(lengths)
    if recipe.bucket_lengths:
        return min(recipe.max_length, bucket_length(longest, recipe.bucket_lengths))
    return padded_length(longest, recipe.pad_multiple, recipe.max_length)


def micro_batches(step: Step, lengths: list[int], recipe: Recipe, rank: int = 0, world: int = 1) -> list[dict]:
    """The forwards of one step (gradient accumulation when `micro_batch_tokens` caps a forward's padded tokens).
    Padded: {"samples", "width"}; packed: {"rows", "n_rows"} (a fixed row count, so one shape); packed samples
    (`pack_samples`): one row each, {"rows", "n_rows": 1, "width", "tail_chunk"}, the row padded to the smallest
    of the widths that holds it and its pad tail cut into sequences of at most `max_length`."""
    cap = recipe.micro_batch_tokens
    if recipe.pack_samples:
        if world > 1:
            raise ValueError("pack_samples runs in one process (train() lays the steps out padded under DDP)")
        return [
            {
                "rows": [row],
                "n_rows": 1,
                "width": bucket_length(sum(lengths[i] for i in row), recipe.pack_samples),
                "tail_chunk": recipe.max_length,
            }
            for row in step.rows
        ]
    if recipe.pack:  # each rank packs its share of the step's rows (it may be empty on a short last step)
        rows_per_step = max(1, recipe.tokens_per_step // recipe.pack_length)
        per = min(-(-rows_per_step // world), max(1, cap // recipe.pack_length) if cap else rows_per_step)
        mine = step.rows[rank::world]
        return [{"rows": mine[i : i + per], "n_rows": per} for i in range(0, len(mine), per)]
    width = _pad_width([lengths[i] for i in step.samples], recipe)
    per = max(world, cap // width) if cap else len(step.samples)
    out = []
    for i in range(0, len(step.samples), per):
        mine = step.samples[i : i + per][rank::world]
        if not mine:
            raise ValueError(f"a micro-batch of {per} samples leaves rank {rank} of {world} without samples")
        out.append({"samples": mine, "width": width})
    return out


def _sequences(micro: dict, data: Tokenised, recipe: Recipe) -> int:
    """The (bucketed) sequence count of a packed micro-batch, as the varlen kernels see it."""
    return sequence_count(
        [[len(data.train_ids[i]) for i in row] for row in micro["rows"]],
        micro.get("width", recipe.pack_length),
        micro["n_rows"],
        micro.get("tail_chunk"),
    )


def _to_device(batch: tuple[torch.Tensor, ...], device) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(device, non_blocking=True) for t in batch)


@dataclass(frozen=True)
class StepContext:
    """What every micro-batch of a run is made and run with: the tokenised data, the recipe as this torch runs it,
    the device and dtype, the pad token, pinned host memory (GPUs), this rank's place (`rank` of `world`, summing
    over the ranks with `reduce_sum`) and whether packed rows run through the varlen attention kernels."""

    data: Tokenised
    recipe: Recipe
    device: torch.device
    dtype: str
    pad_id: int
    pin: bool = False
    rank: int = 0
    world: int = 1
    reduce_sum: Callable | None = None
    varlen: bool = False

    @cached_property
    def lengths(self) -> list[int]:
        return [len(x) for x in self.data.train_ids]

    def micro_batches(self, step: Step) -> list[dict]:
        """This rank's micro-batches of `step` (`micro_batches`)."""
        return micro_batches(step, self.lengths, self.recipe, self.rank, self.world)

    def host_batch(self, micro: dict) -> tuple[torch.Tensor, ...]:
        """Host tensors of one micro-batch: padded (input_ids, attention_mask, target) or packed (input_ids,
        position_ids, sample ends[, cu_seqlens with `varlen`], target); pinned on GPUs."""
        data, recipe, pin = self.data, self.recipe, self.pin
        if "rows" in micro:
            tensors = collate_packed(
                [[data.train_ids[i] for i in row] for row in micro["rows"]],
                self.pad_id,
                micro.get("width", recipe.pack_length),
                micro["n_rows"],
                pin=pin,
                tail_chunk=micro.get("tail_chunk"),
            )
            if self.varlen:
                cu = cu_seqlens(tensors[1], _sequences(micro, data, recipe))
                tensors = (*tensors, cu.pin_memory() if pin else cu)
            samples = [i for row in micro["rows"] for i in row]
        else:
            samples = micro["samples"]
            tensors = collate(
                [data.train_ids[i] for i in samples],
                self.pad_id,
                recipe.pad_multiple,
                recipe.max_length,
                pin=pin,
                width=micro["width"],
            )
        target = torch.tensor([data.train_labels[i] for i in samples])
        return (*tensors, target.pin_memory() if pin else target)

    def logits(self, model, batch: tuple[torch.Tensor, ...]):
        """(logits, target) of one micro-batch of device tensors (`host_batch`'s layout); a packed batch's longest
        sequence is the recipe's (`_longest`)."""
        with autocast(self.device, self.dtype):
            if len(batch) >= 4:  # packed, with cu_seqlens when varlen attention is on
                input_ids, position_ids, ends, *cu, target = batch
                longest = _longest(self.recipe)
                return packed_logits(model, input_ids, position_ids, ends, *cu, max_length=longest), target
            input_ids, mask, target = batch
            return model(input_ids=input_ids, attention_mask=mask).logits, target


def scaled_schedule(recipe: Recipe, schedule: list[Step]) -> tuple[float, int]:
    """(learning rate, warmup steps) for a schedule whose steps hold a different number of samples than the
    recipe's `batch_size`: lr scaled by sqrt (or linearly in) mean samples per step / batch_size; warmup kept
    in samples."""
    if recipe.lr_scaling == "none" or not schedule:
        return recipe.learning_rate, recipe.warmup_steps
    ratio = sum(len(s.samples) for s in schedule) / len(schedule) / recipe.batch_size
    if recipe.lr_scaling not in ("sqrt", "linear"):
        raise ValueError(f"lr_scaling must be none, sqrt or linear, not {recipe.lr_scaling!r}")
    factor = math.sqrt(ratio) if recipe.lr_scaling == "sqrt" else ratio
    return recipe.learning_rate * factor, max(1, round(recipe.warmup_steps / ratio))


def _warm_up(model, schedule: list[Step], ctx: StepContext, params) -> None:
    """One forward/backward per distinct micro-batch shape (compilation happens here, outside the timing);
    the gradients are thrown away."""
    seen = set()
    for step in schedule:
        for micro in ctx.micro_batches(step):
            if "rows" in micro:
                width = micro.get("width", ctx.recipe.pack_length)
                shape = ("rows", micro["n_rows"], width, _sequences(micro, ctx.data, ctx.recipe) if ctx.varlen else 0)
            else:
                shape = (len(micro["samples"]), micro["width"])
            if shape in seen:
                continue
            seen.add(shape)
            logits, target = ctx.logits(model, _to_device(ctx.host_batch(micro), ctx.device))
            F.cross_entropy(logits.float(), target).backward()
    for p in params:
        p.grad = None
    _sync(ctx.device)


def _error_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    head = " ".join(lines[:2]) if lines and lines[0].endswith(":") else (lines[0] if lines else "")
    return f"{type(exc).__name__}: {head}"[:500]


def _average_gradients(params, ctx: StepContext) -> None:
    """Average the trainable gradients over the ranks with one summed flat buffer (missing ones count as 0)."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = ctx.reduce_sum(torch.cat([g.reshape(-1) for g in grads])) / ctx.world
    at = 0
    for p, g in zip(params, grads):
        p.grad = flat[at : at + g.numel()].view_as(g).clone()
        at += g.numel()


def _record_step(stats: TrainStats, step_no: int, step: Step, lengths: list[int], trained_lengths: list[int]) -> None:
    stats.steps, stats.samples = step_no, stats.samples + len(step.samples)
    stats.tokens += sum(lengths[i] for i in step.samples)
    trained_lengths.extend(lengths[i] for i in step.samples)


def _longest(recipe: Recipe) -> int | None:
    """The longest sequence the varlen kernels see in a micro-batch: `max_length` for packed samples (no sample is
    longer, and pad tails are cut to it), the row length otherwise (None)."""
    return recipe.max_length if recipe.pack_samples else None


def _graphs_unsupported(recipe: Recipe, dtype: str, world: int) -> str | None:
    """Why whole-step graphs cannot run with these settings (None: they can)."""
    if recipe.pack:
        return "packed steps vary in their number of samples (no fixed layout to capture)"
    if dtype == "fp16":
        return "fp16 loss scaling checks for inf on the host every step"
    if world > 1:
        return "several ranks: DDP's gradient hooks are not captured here"
    return None


def _capture_steps(model, schedule: list[Step], ctx: StepContext, params, optimizer, stats: TrainStats):
    """StepGraphs with every step layout of the schedule captured, largest first (they share one memory pool), or
    None (stats.graph_error says why). Graphs run in one process on a GPU (`_graphs_unsupported`): the host batches
    are pinned."""
    from .step_graphs import StepGraphs, largest_first

    device = ctx.device

    def forward_backward(batches):
        n = sum(batch[-1].shape[0] for batch in batches)
        step_loss = torch.zeros((), device=device)
        for batch in batches:
            logits, target = ctx.logits(model, batch)
            loss = F.cross_entropy(logits.float(), target, reduction="sum") / n
            loss.backward()
            step_loss += loss.detach().float()
        return step_loss

    def update():
        norm = torch.nn.utils.clip_grad_norm_(params, ctx.recipe.max_grad_norm)
        optimizer.step()
        return norm.detach().float()

    graphs = StepGraphs(forward_backward, update, optimizer, params, device)
    try:
        layouts: dict[tuple, list] = {}  # one step's host batches per layout
        for step in schedule:
            batches = [ctx.host_batch(micro) for micro in ctx.micro_batches(step)]
            layouts.setdefault(StepGraphs.layout(batches), batches)
        for layout in largest_first(list(layouts)):
            graphs.capture(layouts[layout])
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - the steps run uncaptured instead (recorded)
        stats.graph_error = _error_line(e)
        for p in params:
            p.grad = None
        _sync(device)
        return None
    return graphs


def _schedule(recipe: Recipe, lengths: list[int]) -> tuple[Recipe, list]:
    """The recipe as this torch can run it (packing falls back to padded batches where unsupported) and its
    steps: every epoch's plan, repeated or cut to max_steps."""
    if (recipe.pack or recipe.pack_samples) and not packing_supported():  # the same steps, laid out padded
        recipe = dataclasses.replace(recipe, pack=False, pack_samples=None, varlen_attention=False)
    schedule = [s for epoch in range(recipe.epochs) for s in plan_epoch(lengths, recipe, recipe.seed + epoch)]
    if recipe.max_steps:
        schedule = (schedule * math.ceil(recipe.max_steps / max(1, len(schedule))))[: recipe.max_steps]
    return recipe, schedule


def _try_compile(model, recipe: Recipe, device: torch.device, backend: str | None, stats: TrainStats) -> int:
    """How many layers were compiled (0: eager; why, in `stats.compile_error`). Compiled layers run on GPUs only
    unless a `backend` is named."""
    if not recipe.compile or (device.type != "cuda" and not backend):
        return 0
    # An image whose torch cannot compile says so (envbuild sets this on source-built ROCm torch without Triton):
    # the run goes eager from the start and records why, instead of failing into the fallback below.
    unavailable = os.environ.get(COMPILE_UNAVAILABLE_ENV)
    # A wheel whose torch.compile fails without a GPU (torch 2.13.0+rocm7.2, pytorch/pytorch#189194): a run on a
    # host with no GPU goes eager from the start and records why.
    if not unavailable and device.type != "cuda" and (needs_gpu := os.environ.get(COMPILE_NEEDS_GPU_ENV)):
        unavailable = f"no GPU on this host: {needs_gpu}"
    if unavailable:
        stats.compile_error = f"unavailable in this image: {unavailable}"
        return 0
    try:
        return compile_layers(model, backend=backend or "inductor")
    except Exception as e:  # noqa: BLE001 - an environment without a working compiler trains eager
        stats.compile_error = _error_line(e)
        uncompile_layers(model)
        return 0


def _no_varlen(device: torch.device, dtype: str) -> str | None:
    """Why the varlen attention kernels cannot run here (None: they can). They are GPU-only."""
    if device.type != "cuda":
        return "no varlen attention kernel on the CPU"
    if dtype not in ("bf16", "fp16"):
        return f"the varlen kernels take bf16/fp16, not {dtype}"
    return varlen_available()


def _varlen(recipe: Recipe, device: torch.device, dtype: str, stats: TrainStats) -> bool:
    """Whether packed rows run through the varlen attention kernels (why not, in `stats.varlen_error`); elsewhere
    packed rows use masks."""
    if not ((recipe.pack or recipe.pack_samples) and recipe.varlen_attention):
        return False
    stats.varlen_error = _no_varlen(device, dtype)
    return stats.varlen_error is None


def _unpack_samples(recipe: Recipe, device: torch.device, dtype: str, world: int) -> tuple[Recipe, str | None]:
    """Packed sample steps (`pack_samples`) where they run: one process, and with varlen attention asked for, where
    its kernels run (packed rows of up to 2048 tokens through dense masks would cost more than the padded steps
    save). Elsewhere the same steps run padded (`bucket_lengths`); the second value says why."""
    if not recipe.pack_samples:
        return recipe, None
    why = "packed sample steps run in one process" if world > 1 else None
    if why is None and recipe.varlen_attention:
        why = _no_varlen(device, dtype)
    if why is None:
        return recipe, None
    return dataclasses.replace(recipe, pack_samples=None, varlen_attention=False), why


def _warm_up_compiled(model, schedule: list[Step], ctx: StepContext, params, stats: TrainStats, compiled: int) -> int:
    """Compile every step shape before the timed loop (`stats.warmup_seconds`); the compiled layer count, or 0
    when compiling failed and the same loop runs eager (recorded)."""
    _sync(ctx.device)
    begin = time.perf_counter()
    # Warm-up through the unwrapped module: DDP would sync (and ranks may see different shapes).
    try:
        _warm_up(getattr(model, "module", model), schedule, ctx, params)
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - compilation failed: the same loop runs eager (recorded)
        stats.compile_error = _error_line(e)
        uncompile_layers(model)
        compiled = 0
        for p in params:
            p.grad = None
    stats.warmup_seconds = time.perf_counter() - begin
    return compiled


def _update(params, optimizer, scheduler, scaler, max_grad_norm: float) -> torch.Tensor:
    """One optimizer step after the step's backward passes: unscale, clip (the norm is returned), step."""
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


def _note_memory_peak(stats: TrainStats, phase: str, device: torch.device) -> None:
    if device.type == "cuda":
        stats.memory_peaks[phase] = (torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device))


def _report_steps(
    stats: TrainStats, step_no: int, steps: int, ctx: StepContext, on_step, pending_loss: list, pending_norm: list
) -> tuple[list, list]:
    """Every `log_every` steps and at the last: check the pending losses and norms (one sync) and report the
    step; returns the lists still pending."""
    if step_no % ctx.recipe.log_every != 0 and step_no != steps:
        return pending_loss, pending_norm
    _check_finite(stats, pending_loss, pending_norm, step_no - len(pending_loss) + 1, ctx)
    if on_step:
        on_step(step_no, steps, stats.train_loss[-1][1])
    return [], []


def train(
    model,
    data: Tokenised,
    recipe: Recipe,
    *,
    device: torch.device,
    dtype: str,
    pad_id: int,
    on_step=None,
    ddp_rank: int = 0,
    ddp_world: int = 1,
    reduce_sum=None,
    compile_backend: str | None = None,
) -> TrainStats:
    """Train `model` (its trainable parameters) for the recipe's epochs (or max_steps).

    Steps come from `plan_epoch`; each runs as one or more micro-batches (`micro_batches`). Under data
    parallelism each of `ddp_world` ranks takes its slice of every micro-batch of the global step.
    `compile_backend`: the torch.compile backend for the recipe's compiled layers; None compiles with inductor
    on GPUs only (its CPU compile costs more than it saves on short runs)."""
    if recipe.pack and ddp_world > 1 and reduce_sum is None:
        raise ValueError("packed batches with several processes need reduce_sum (a sum over the ranks)")
    params = [p for p in model.parameters() if p.requires_grad]
    lengths = [len(x) for x in data.train_ids]
    recipe, unpacked = _unpack_samples(recipe, device, dtype, ddp_world)
    recipe, schedule = _schedule(recipe, lengths)
    learning_rate, warmup_steps = scaled_schedule(recipe, schedule)
    stats, pending_loss, pending_norm = TrainStats(), [], []
    use_graphs = False
    if recipe.graph_steps and device.type == "cuda":
        stats.graph_error = _graphs_unsupported(recipe, dtype, ddp_world)
        use_graphs = stats.graph_error is None
    optimizer, scheduler = make_optimizer(
        params,
        recipe.replace(learning_rate=learning_rate, warmup_steps=warmup_steps),
        device,
        len(schedule),
        capturable=use_graphs,
    )
    scaler = torch.amp.GradScaler(device.type, enabled=(dtype == "fp16"))
    stats.learning_rate, stats.warmup_steps = learning_rate, warmup_steps
    stats.packed = recipe.pack or bool(recipe.pack_samples)
    pin = device.type == "cuda"
    # Packed forwards call the backbone directly, past DDP's forward, so DDP does not sync their gradients:
    # they are averaged over the ranks by hand, once per step.
    manual_sync = recipe.pack and ddp_world > 1
    forward_model = model.module if manual_sync and hasattr(model, "module") else model
    model.train()
    compiled = _try_compile(model, recipe, device, compile_backend, stats)
    # No KV cache in training: transformers would otherwise build one per forward (and compiled layers would
    # recompile per layer on its state).
    configs = [m.config for m in model.modules() if getattr(getattr(m, "config", None), "use_cache", False)]
    for config in configs:
        config.use_cache = False
    varlen = stats.varlen_attention = _varlen(recipe, device, dtype, stats)
    stats.varlen_error = stats.varlen_error or unpacked
    ctx = StepContext(
        data,
        recipe,
        device,
        dtype,
        pad_id,
        pin=pin,
        rank=ddp_rank,
        world=ddp_world,
        reduce_sum=reduce_sum,
        varlen=varlen,
    )
    attention = contextlib.ExitStack()
    try:
        if varlen:
            attention.enter_context(varlen_attention_on(model))
        if recipe.merged_qkv:
            stats.merged_qkv_blocks = attention.enter_context(merged_qkv_on(model))
        if compiled:
            compiled = _warm_up_compiled(model, schedule, ctx, params, stats, compiled)
            _note_memory_peak(stats, "compile warm-up", device)
        stats.compiled_layers = compiled
        graphs = None
        if use_graphs:
            _sync(device)
            begin = time.perf_counter()
            graphs = _capture_steps(forward_model, schedule, ctx, params, optimizer, stats)
            stats.warmup_seconds += time.perf_counter() - begin
            _note_memory_peak(stats, "capture", device)
        stats.graphed_layouts = len(graphs.graphs) if graphs else 0
        trained_lengths: list[int] = []
        # a fixed number of untimed steps first (the speed preset): samples, tokens and time count from the next one
        stats.untimed_steps = min(recipe.untimed_steps, len(schedule) - 1) if len(schedule) > 1 else 0
        untimed = (0, 0)
        _sync(device)
        start = time.perf_counter()
        for step_no, step in enumerate(schedule, start=1):
            if step_no == stats.untimed_steps + 1 and stats.untimed_steps:
                _sync(device)
                start, untimed = time.perf_counter(), (stats.samples, stats.tokens)
                trained_lengths.clear()
            n_global = len(step.samples)
            micros = ctx.micro_batches(step)
            if graphs is not None:
                batches = [ctx.host_batch(micro) for micro in micros]
                step_loss, norm = graphs.step(batches)
                scheduler.step()
                stats.padded_tokens += sum(batch[0].numel() for batch in batches)
                _record_step(stats, step_no, step, lengths, trained_lengths)
                pending_loss.append(step_loss)
                pending_norm.append(norm)
                pending_loss, pending_norm = _report_steps(
                    stats, step_no, len(schedule), ctx, on_step, pending_loss, pending_norm
                )
                continue
            step_loss = torch.zeros((), device=device)
            for k, micro in enumerate(micros):
                sync_now = k == len(micros) - 1 or not hasattr(model, "no_sync")
                with contextlib.nullcontext() if sync_now else model.no_sync():
                    batch = ctx.host_batch(micro)
                    logits, target = ctx.logits(forward_model, _to_device(batch, device))
                    # Mean over the global step: each micro-batch's sum / step size (x world: DDP averages).
                    loss = F.cross_entropy(logits.float(), target, reduction="sum") / n_global * ddp_world
                    scaler.scale(loss).backward()
                step_loss += loss.detach().float() / ddp_world
                stats.padded_tokens += batch[0].numel()
            if manual_sync:
                _average_gradients(params, ctx)
            norm = _update(params, optimizer, scheduler, scaler, recipe.max_grad_norm)
            pending_loss.append(step_loss)
            pending_norm.append(norm.detach().float())
            _record_step(stats, step_no, step, lengths, trained_lengths)
            pending_loss, pending_norm = _report_steps(
                stats, step_no, len(schedule), ctx, on_step, pending_loss, pending_norm
            )
        _sync(device)
        stats.seconds = time.perf_counter() - start
        _note_memory_peak(stats, "steps", device)
        stats.samples, stats.tokens = stats.samples - untimed[0], stats.tokens - untimed[1]
        stats.attention_flops = attention_flops(trained_lengths, attention_layers(model))
    finally:
        attention.close()
        if compiled:
            uncompile_layers(model)
        for config in configs:
            config.use_cache = True
    stats.padded_tokens *= ddp_world  # each rank counted its own share
    return stats
