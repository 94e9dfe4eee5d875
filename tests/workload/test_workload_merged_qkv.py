"""Merged q/k/v projections (workload/training/merged_qkv.py): peft's results without dropout, one shared mask with it,
peft's modules and forwards back afterwards, and no merge where it would not be plain LoRA.

Tiny random Gemma and Gemma 4 classifiers with peft LoRA on the CPU, fp32."""

import dataclasses
import importlib

import pytest
import torch
import torch.nn.functional as F

from workload.model.classifier import apply_lora
from workload.training.loop import train
from workload.training.merged_qkv import NAMES, mergeable, merged_qkv_on

from numerics import assert_same_math, fp32_loss_rtol
from tests.workload.test_workload_speed import CPU, PAD, _data, _model, _recipe

FAMILIES = ["gemma", "gemma4_text"]


def _model_b(family="gemma", dtype=torch.float32):
    """A tiny model whose LoRA B matrices are random (peft starts them at zero: no LoRA output, no A gradient)."""
    model = _model(family).to(dtype)
    torch.manual_seed(3)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.2)
    return model


# The largest single sum in the tiny models (3 rows x 24 tokens reduced into a weight gradient, or a
# 128-wide MLP contraction), rounded up, and the reductions chained through 2 layers forward and backward.
REDUCTION, DEPTH = 256, 32


def _batch(seed=0, rows=3, width=24):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(10, 300, (rows, width), generator=g), torch.ones(rows, width, dtype=torch.long)


def _attention_blocks(model):
    return [m for m in model.modules() if any(isinstance(getattr(m, n, None), torch.nn.Module) for n in NAMES)]


def _logits_and_grads(model, merged: bool):
    ids, mask = _batch()
    model.zero_grad(set_to_none=True)
    if merged:
        with merged_qkv_on(model) as blocks:
            logits = model(input_ids=ids, attention_mask=mask).logits
            assert blocks == len(_attention_blocks(model)) > 0
    else:
        logits = model(input_ids=ids, attention_mask=mask).logits
    logits.square().sum().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("family", FAMILIES)
def test_without_dropout_merged_projections_give_peft_logits_and_gradients(family):
    """Compared in float64 (tests/numerics.py): the two paths differ only in summation order."""
    model = _model_b(family, torch.float64)
    model.train()
    want_logits, want_grads = _logits_and_grads(model, merged=False)
    got_logits, got_grads = _logits_and_grads(model, merged=True)
    assert_same_math(got_logits, want_logits, REDUCTION, DEPTH)
    assert got_grads.keys() == want_grads.keys()
    lora_grads = [n for n in got_grads if "lora_A" in n and any(p in n for p in NAMES)]
    assert lora_grads and all(got_grads[n].abs().sum() > 0 for n in lora_grads)  # merged A: still their own
    for name in got_grads:
        assert_same_math(got_grads[name], want_grads[name], REDUCTION, DEPTH, msg=name)


def test_with_dropout_q_k_v_share_one_mask():
    model = _model_b("gemma", torch.float64)
    for module in model.modules():  # dropout 0.5 everywhere LoRA has one
        if hasattr(module, "lora_dropout"):
            module.lora_dropout["default"] = torch.nn.Dropout(0.5)
    model.train()
    attention = _attention_blocks(model)[0]
    q, k, v = (getattr(attention, n) for n in NAMES)
    x = torch.randn(2, 5, 64, dtype=torch.float64)
    with merged_qkv_on(model):
        torch.manual_seed(7)
        got = [q(x), k(x), v(x)]
    torch.manual_seed(7)
    dropped = F.dropout(x, 0.5, training=True)  # the one mask the merged path draws
    want = [
        F.linear(x, m.base_layer.weight) + m.lora_B["default"](m.lora_A["default"](dropped)) * m.scaling["default"]
        for m in (q, k, v)
    ]
    for g, w in zip(got, want):
        assert_same_math(g, w, REDUCTION, DEPTH)
    # peft's own path draws a mask per projection: its k differs from the shared-mask one
    torch.manual_seed(7)
    q(x)
    assert not torch.allclose(k(x), want[1])


def test_peft_forwards_names_and_weights_are_back_afterwards_even_on_error():
    model = _model("gemma")
    before = {n: p.detach().clone() for n, p in model.state_dict().items()}
    with pytest.raises(RuntimeError, match="boom"):
        with merged_qkv_on(model):
            assert all("forward" in getattr(b, n).__dict__ for b in _attention_blocks(model) for n in NAMES)
            raise RuntimeError("boom")
    assert not any("forward" in m.__dict__ for m in model.modules())
    after = model.state_dict()
    assert after.keys() == before.keys()
    for name, value in before.items():
        assert torch.equal(after[name], value), name


def test_k_and_v_called_on_another_input_run_their_own_projection():
    model = _model_b("gemma")
    model.eval()
    attention = _attention_blocks(model)[0]
    q, k = attention.q_proj, attention.k_proj
    x, other = torch.randn(2, 5, 64), torch.randn(2, 5, 64)
    want = k(other)
    with merged_qkv_on(model):
        q(x)
        torch.testing.assert_close(k(other), want)


def test_only_plain_lora_on_two_or_more_projections_is_merged():
    import transformers

    from tests.workload.test_workload_speed import BOS, EOS

    config = transformers.GemmaConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        num_labels=7,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
    )

    def blocks(**lora):
        from peft import LoraConfig, get_peft_model

        base = transformers.GemmaForSequenceClassification._from_config(config, attn_implementation="sdpa")
        model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, bias="none", **lora))
        return sum(1 for m in model.modules() if mergeable(m))

    assert blocks(target_modules=["q_proj", "k_proj", "v_proj"]) == 2
    assert blocks(target_modules=["q_proj", "v_proj"]) == 2
    assert blocks(target_modules=["q_proj", "o_proj"]) == 0  # one projection: nothing to merge
    assert blocks(target_modules=["q_proj", "k_proj", "v_proj"], use_dora=True) == 0
    model = apply_lora(
        transformers.GemmaForSequenceClassification._from_config(config), 4, 8, 0.0, ("q_proj", "k_proj", "v_proj")
    )
    model.base_model.model.model.layers[0].self_attn.k_proj.lora_dropout["default"] = torch.nn.Dropout(0.3)
    assert sum(1 for m in model.modules() if mergeable(m)) == 1  # different dropout: that block stays peft's


@pytest.mark.parametrize("compiled", [False, True])
def test_training_with_merged_qkv_reproduces_peft_losses_and_says_so(compiled, monkeypatch):
    if compiled:
        importlib.import_module("torch._dynamo")

        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
    data = _data()
    runs = []
    for merged in (False, True):
        recipe = _recipe(compile=compiled, merged_qkv=merged)
        model = _model_b("gemma", torch.float64)  # dtype="fp32" below means no autocast: the run stays float64
        stats = train(
            model, data, recipe, device=CPU, dtype="fp32", pad_id=PAD, compile_backend="aot_eager" if compiled else None
        )  # the compiled path on the CPU, quickly
        runs.append(([loss for _, loss in stats.train_loss], stats))
    (plain, plain_stats), (merged_losses, merged_stats) = runs
    assert plain_stats.merged_qkv_blocks == 0 and merged_stats.merged_qkv_blocks == 2
    # 4 steps of at most 256 samples, the loss in fp32 (tests/numerics.py)
    assert merged_losses == pytest.approx(plain, rel=2 * fp32_loss_rtol(256, 4))
    if compiled:
        assert merged_stats.compiled_layers == 2 and merged_stats.compile_error is None
        assert not torch._dynamo.utils.counters["graph_break"], dict(torch._dynamo.utils.counters["graph_break"])


def test_the_throughput_preset_asks_for_merged_qkv_and_a_run_records_it():
    from workload.training.presets import PRESETS

    assert PRESETS["throughput"].merged_qkv and not PRESETS["seed"].merged_qkv
    recipe = dataclasses.replace(_recipe(), merged_qkv=True)
    stats = train(_model("gemma"), _data(), recipe, device=CPU, dtype="fp32", pad_id=PAD)
    assert stats.merged_qkv_blocks == 2
