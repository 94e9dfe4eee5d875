"""The training loop: a plain PyTorch loop (no HF Trainer), device-agnostic, AMP, NaN guard, throughput."""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .batching import collate, eval_batches, train_batches
from .errors import NonFiniteLoss
from .metrics import accuracy, macro_f1
from .presets import Recipe


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
    seconds: float = 0.0

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


def make_optimizer(params, recipe: Recipe, device: torch.device, total_steps: int):
    """AdamW (fused kernel on GPUs) with linear warmup then linear decay to zero, as HF's default schedule."""
    kwargs = dict(lr=recipe.learning_rate, weight_decay=recipe.weight_decay)
    if device.type == "cuda":
        kwargs["fused"] = True
    optimizer = torch.optim.AdamW(params, **kwargs)
    warmup = recipe.warmup_steps

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


@torch.no_grad()
def evaluate(model, ids: list[list[int]], labels: list[int], *, device: torch.device, dtype: str, pad_id: int,
             recipe: Recipe, num_labels: int) -> dict:
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
    return {"accuracy": accuracy(preds, labels), "macro_f1": macro_f1(preds, labels, num_labels),
            "loss": total_loss / max(1, len(ids))}


def _check_finite(stats: TrainStats, losses: list, norms: list, first_step: int, dtype: str, reduce_sum) -> None:
    loss_values = torch.stack(losses)
    if reduce_sum is not None:
        loss_values = reduce_sum(loss_values)  # each rank holds its share of the global-batch mean
    for offset, (loss, norm) in enumerate(zip(loss_values.tolist(), torch.stack(norms).tolist())):
        step = first_step + offset
        stats.train_loss.append([step, loss])
        stats.grad_norm.append([step, norm])
        # Under fp16 AMP an inf gradient norm is a skipped step (GradScaler lowers the scale); the loss must be finite.
        if not math.isfinite(loss) or (dtype != "fp16" and not math.isfinite(norm)):
            raise NonFiniteLoss(f"training diverged at step {step}: loss={loss}, grad_norm={norm} "
                                "(lower the learning rate, or use bf16/fp32 instead of fp16)")


def train(model, data: Tokenised, recipe: Recipe, *, device: torch.device, dtype: str, pad_id: int,
          on_step=None, ddp_rank: int = 0, ddp_world: int = 1, reduce_sum=None) -> TrainStats:
    """Train `model` (its trainable parameters) for the recipe's epochs (or max_steps).

    Batches are length-bucketed and padded to a multiple of `recipe.pad_multiple`. Under data parallelism each
    of `ddp_world` ranks takes its slice of every global batch of `recipe.batch_size` samples."""
    params = [p for p in model.parameters() if p.requires_grad]
    lengths = [len(x) for x in data.train_ids]
    epochs = [train_batches(lengths, recipe.batch_size, seed=recipe.seed + epoch, bucket_batches=recipe.bucket_batches)
              for epoch in range(recipe.epochs)]
    schedule = [b for epoch in epochs for b in epoch]
    if recipe.max_steps:
        schedule = (schedule * math.ceil(recipe.max_steps / max(1, len(schedule))))[:recipe.max_steps]
    optimizer, scheduler = make_optimizer(params, recipe, device, len(schedule))
    scaler = torch.amp.GradScaler(device.type, enabled=(dtype == "fp16"))
    stats, pending_loss, pending_norm = TrainStats(), [], []
    pin = device.type == "cuda"
    model.train()
    _sync(device)
    start = time.perf_counter()
    for step, global_batch in enumerate(schedule, start=1):
        batch = global_batch[ddp_rank::ddp_world]
        input_ids, mask = collate([data.train_ids[i] for i in batch], pad_id, recipe.pad_multiple,
                                  recipe.max_length, pin=pin)
        target = torch.tensor([data.train_labels[i] for i in batch])
        if pin:
            target = target.pin_memory()
        input_ids, mask = input_ids.to(device, non_blocking=True), mask.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        with autocast(device, dtype):
            logits = model(input_ids=input_ids, attention_mask=mask).logits
        # Mean over the global batch: each rank's sum / global batch size, summed again by the DDP all-reduce.
        loss = F.cross_entropy(logits.float(), target, reduction="sum") / len(global_batch) * ddp_world
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(params, recipe.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        pending_loss.append(loss.detach().float() / ddp_world)
        pending_norm.append(norm.detach().float())
        stats.steps, stats.samples = step, stats.samples + len(global_batch)
        stats.tokens += sum(lengths[i] for i in global_batch)
        if step % recipe.log_every == 0 or step == len(schedule):
            _check_finite(stats, pending_loss, pending_norm, step - len(pending_loss) + 1, dtype, reduce_sum)
            pending_loss, pending_norm = [], []
            if on_step:
                on_step(step, len(schedule), stats.train_loss[-1][1])
    _sync(device)
    stats.seconds = time.perf_counter() - start
    return stats
