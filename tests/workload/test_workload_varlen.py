"""Packed rows through varlen attention kernels (workload/training/varlen.py) instead of dense per-row masks.

The kernels exist on GPUs only (CUDA and ROCm builds of PyTorch): the CPU tests cover the sequence
boundaries, the recipe rules and the fallback; the GPU rows (`pytest --noconftest tests/workload/test_workload_varlen.py`
on the H200) check logits, gradients and training losses against the masked and padded paths."""

import dataclasses
import random

import pytest
import torch
import torch.nn.functional as F

from workload.training.batching import collate, collate_packed, packed_steps
from workload.training.loop import autocast, plan_epoch, train
from workload.training.speed import packed_logits
from workload.training.varlen import NAME, SEQUENCE_BUCKET, cu_seqlens, sequence_count, varlen_attention_on

from tests.workload.test_workload_speed import BOS, EOS, PAD, _data, _model, _recipe

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (CUDA or ROCm)")


def test_cu_seqlens_start_every_sample_and_every_pad_tail():
    rows = [[[5, 6, 7], [8, 9]], [[4]], []]
    _, pos, _ = collate_packed(rows, PAD, 6, 3)
    # samples [0,3) [3,5); tail [5,6); sample [6,7); tail [7,12); empty row = one tail [12,18)
    cu = cu_seqlens(pos, sequence_count([[3, 2], [1], []], 6, 3))
    assert cu.dtype == torch.int32 and cu.numel() == SEQUENCE_BUCKET + 1
    assert cu[:7].tolist() == [0, 3, 5, 6, 7, 12, 18]
    assert set(cu[7:].tolist()) == {18}  # empty sequences after the last


def test_a_full_row_has_no_pad_tail_sequence():
    _, pos, _ = collate_packed([[[1, 2], [3, 4]]], PAD, 4, 1)
    assert sequence_count([[2, 2]], 4, 1) == SEQUENCE_BUCKET
    assert cu_seqlens(pos, SEQUENCE_BUCKET)[:3].tolist() == [0, 2, 4]


def test_a_batch_that_fills_its_bucket_exactly_fits_and_one_more_sequence_does_not():
    """62 samples and a tail, then a full row of 1 sample: 64 sequences, exactly one bucket."""
    rows = [[[7]] * 62, [[7] * 100]]
    _, pos, _ = collate_packed(rows, PAD, 100, 2)
    count = sequence_count([[1] * 62, [100]], 100, 2)
    assert count == SEQUENCE_BUCKET
    cu = cu_seqlens(pos, count)
    assert cu.numel() == SEQUENCE_BUCKET + 1 and cu[-3:].tolist() == [62, 100, 200]  # no empty sequence left
    with pytest.raises(ValueError, match="64 sequences in the batch, more than the 63 planned"):
        cu_seqlens(pos, 63)


def test_each_row_counts_its_samples_plus_its_pad_tail():
    """63 samples and a tail, then 1 sample and a tail: 66 sequences, two buckets (a count off by one in either row
    would fit in one)."""
    assert sequence_count([[1] * 63, [1]], 100, 2) == 2 * SEQUENCE_BUCKET
    assert sequence_count([[1] * 61, [99, 1]], 100, 2) == SEQUENCE_BUCKET  # 62 + 2: a full row has no tail


def test_sequence_count_covers_what_collate_packs_in_few_buckets():
    rng = random.Random(3)
    lengths = [int(min(512, max(2, rng.lognormvariate(4.0, 0.7)))) for _ in range(12000)]
    seen, raw = set(), set()
    for rows in packed_steps(lengths, 512, 16, seed=0):
        _, pos, _ = collate_packed([[[7] * lengths[i] for i in row] for row in rows], PAD, 512, 16)
        planned = sequence_count([[lengths[i] for i in row] for row in rows], 512, 16)
        actual = int((pos == 0).sum())
        assert planned % SEQUENCE_BUCKET == 0 and actual <= planned < actual + SEQUENCE_BUCKET
        seen.add(planned)
        raw.add(actual)
    assert len(seen) * 4 <= len(raw), (seen, raw)  # the compiled layers see few cu_seqlens shapes


def test_a_pad_tail_cut_into_chunks_counts_one_sequence_per_chunk():
    """Packed samples (one row of up to 2048 tokens): the pad tail restarts every max_length tokens, so no
    sequence is longer than max_length, and the plan counts every chunk."""
    rng = random.Random(7)
    for _ in range(200):
        lengths = [rng.randrange(1, 129) for _ in range(rng.randrange(1, 17))]
        width = rng.choice([256, 512, 1024, 2048])
        if sum(lengths) > width:
            continue
        _, pos, _ = collate_packed([[[7] * n for n in lengths]], PAD, width, 1, tail_chunk=128)
        cu = cu_seqlens(pos, sequence_count([lengths], width, 1, tail_chunk=128))
        spans = (cu[1:] - cu[:-1]).tolist()
        assert max(spans) <= 128 and sum(spans) == width
        assert int((pos == 0).sum()) == len(lengths) + -(-(width - sum(lengths)) // 128)
    assert sequence_count([[100, 28]], 128, 1, tail_chunk=64) == SEQUENCE_BUCKET  # a full row: no tail
    # 60 samples and a tail of 5 chunks: 65 sequences, past one bucket (one tail sequence would fit in it)
    _, pos, _ = collate_packed([[[7]] * 60], PAD, 60 + 5 * 128, 1, tail_chunk=128)
    count = sequence_count([[1] * 60], 60 + 5 * 128, 1, tail_chunk=128)
    assert count == 2 * SEQUENCE_BUCKET and cu_seqlens(pos, count)[60:67].tolist() == [
        60 + 128 * k for k in range(6)
    ] + [700]


def test_more_sequences_than_planned_is_refused():
    _, pos, _ = collate_packed([[[1]] * 5], PAD, 5, 1)
    with pytest.raises(ValueError, match="5 sequences"):
        cu_seqlens(pos, 4)


def test_varlen_attention_needs_packed_rows():
    with pytest.raises(ValueError, match="needs pack"):
        plan_epoch([10] * 40, _recipe(varlen_attention=True), seed=0)


def test_the_switch_sets_every_config_and_restores_it_even_on_error():
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    model = _model("gemma4_text")
    configs = {
        id(m.config): m.config for m in model.modules() if hasattr(getattr(m, "config", None), "_attn_implementation")
    }
    with pytest.raises(RuntimeError):
        with varlen_attention_on(model):
            assert {c._attn_implementation for c in configs.values()} == {NAME}
            assert NAME in ALL_ATTENTION_FUNCTIONS
            raise RuntimeError("boom")
    assert {c._attn_implementation for c in configs.values()} == {"sdpa"}


def test_on_the_cpu_packed_rows_keep_their_masks_and_the_run_says_why():
    recipe = _recipe(tokens_per_step=1024, pack=True, pack_length=256, bucket_lengths=None)
    data = _data()
    masked = train(_model(), data, recipe, device=torch.device("cpu"), dtype="fp32", pad_id=PAD)
    asked = train(
        _model(),
        data,
        dataclasses.replace(recipe, varlen_attention=True),
        device=torch.device("cpu"),
        dtype="fp32",
        pad_id=PAD,
    )
    assert not asked.varlen_attention and "CPU" in asked.varlen_error
    assert asked.train_loss == masked.train_loss


def _long_data():
    """Samples longer than the tiny Gemma 4's sliding window (16), so the window shapes the attention."""
    rng = random.Random(5)
    ids = [[BOS] + [rng.randrange(10, 300) for _ in range(n)] + [EOS] for n in (40, 7, 90, 25, 61, 12, 150, 33)]
    return ids, [x[1] % 7 for x in ids]


@GPU
@pytest.mark.parametrize("family", ["gemma", "gemma4_text", "gemma4_global_512"])
def test_varlen_packed_logits_and_gradients_equal_the_masked_and_padded_paths(family):
    """bf16 autocast, as in training: the varlen kernels against the same packed rows with transformers' masks,
    and against padded batches (LoRA B starts at zero, so B's gradients carry the signal; A's are zero)."""
    dev = torch.device("cuda")
    # gemma4_global_512: the global layer's head_dim 512 is beyond Flash Attention (the memory-efficient path)
    model = (_model("gemma4_text", global_head_dim=512) if family == "gemma4_global_512" else _model(family)).to(dev)
    ids, labels = _long_data()
    rows = [[0, 1, 2], [3, 4, 5, 6], [7]]
    batch = [t.to(dev) for t in collate_packed([[ids[i] for i in r] for r in rows], PAD, 256, 4)]
    cu = cu_seqlens(batch[1].cpu(), sequence_count([[len(ids[i]) for i in r] for r in rows], 256, 4)).to(dev)
    order = [i for r in rows for i in r]
    pids, mask = collate([ids[i] for i in order], PAD, 8, 256)
    target = torch.tensor([labels[i] for i in order], device=dev)
    results = {}
    for run in ("varlen", "masked", "padded"):
        model.zero_grad()
        with autocast(dev, "bf16"):
            if run == "varlen":
                with varlen_attention_on(model):
                    logits = packed_logits(model, *batch, cu_seqlens=cu)
            elif run == "masked":
                logits = packed_logits(model, *batch)
            else:
                logits = model(input_ids=pids.to(dev), attention_mask=mask.to(dev)).logits
        F.cross_entropy(logits.float(), target).backward()
        results[run] = (logits.float(), [p.grad.clone() for p in model.parameters() if p.requires_grad])
    lv, gv = results["varlen"]
    for other in ("masked", "padded"):
        lo, go = results[other]
        scale = lo.abs().max().item()
        assert (lv - lo).abs().max().item() <= 2e-2 * scale, (other, (lv - lo).abs().max().item(), scale)
        for a, b in zip(gv, go):
            err, size = (a - b).abs().max().item(), b.abs().max().item()
            assert err <= 5e-2 * size + 1e-6, (other, err, size)
    assert any(g.abs().max() > 0 for g in gv)


@GPU
@pytest.mark.parametrize("compiled, global_head_dim", [(False, 16), (True, 16), (True, 512)])
def test_training_with_varlen_attention_reproduces_masked_packed_losses(compiled, global_head_dim):
    """global_head_dim 512: the memory-efficient kernel, which runs between the compiled graphs (inductor cannot
    trace its backward in torch 2.11)."""
    dev = torch.device("cuda")
    recipe = _recipe(
        tokens_per_step=1024,
        pack=True,
        pack_length=256,
        bucket_lengths=None,
        compile=compiled,
        dtype="bf16",
        max_steps=6,
    )
    data = _data()
    runs = []
    for varlen in (False, True):
        stats = train(
            _model("gemma4_text", global_head_dim=global_head_dim).to(dev),
            data,
            dataclasses.replace(recipe, varlen_attention=varlen),
            device=dev,
            dtype="bf16",
            pad_id=PAD,
        )
        assert stats.varlen_attention == varlen and stats.varlen_error is None
        assert stats.compiled_layers == (2 if compiled else 0), stats.compile_error
        runs.append([loss for _, loss in stats.train_loss])
    torch._dynamo.reset()
    assert len(runs[0]) == 6
    # bf16 drift over 6 steps: 0.022 at step 6 with the head_dim-512 layers (H100, torch 2.11)
    assert max(abs(a - b) for a, b in zip(*runs)) < 3e-2, runs
