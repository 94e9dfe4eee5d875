"""Tiny models of every Gemma family: build, LoRA, forward, train steps, adapter save/reload; plus MFU/batching."""

import pytest
import torch
from numerics import assert_same_math

from workload.data.dataset import load_dataset
from workload.errors import UnsupportedFamily
from workload.model import classifier as models
from workload.model.classifier import apply_lora, load_adapter, load_base, make_trainable_fp32, save_adapter
from workload.probes.environment import peak_tflops
from workload.training.batching import collate, encode, padded_length, train_batches
from workload.training.loop import Tokenised, train
from workload.training.metrics import macro_f1, mfu
from workload.training.presets import PRESETS

DATA = load_dataset()


@pytest.mark.parametrize(
    "model_id,family",
    [
        ("tiny-gemma", "gemma"),
        ("tiny-gemma2", "gemma2"),
        ("tiny-gemma3", "gemma3_text"),
        ("tiny-gemma4", "gemma4_text"),
    ],
)
def test_tiny_family_trains_and_round_trips(tmp_path, model_id, family):
    texts = [e.text for e in DATA.train]
    loaded = load_base(model_id, len(DATA.labels), work_dir=tmp_path / "base", tokenizer_texts=texts)
    assert loaded.family == family
    loaded.model = apply_lora(loaded.model, 8, 16, 0.0, PRESETS["smoke"].target_modules)
    make_trainable_fp32(loaded.model)
    trainable = {n for n, p in loaded.model.named_parameters() if p.requires_grad}
    assert any("lora_A" in n for n in trainable) and any("score" in n for n in trainable)
    assert not any("embed" in n or "mlp" in n for n in trainable)
    before = {n: p.detach().clone() for n, p in loaded.model.named_parameters()}
    ids = encode(loaded.tokenizer, texts, 64)
    labels = [DATA.labels.index(e.label) for e in DATA.train]
    stats = train(
        loaded.model,
        Tokenised(ids, labels, ids[:4], labels[:4]),
        PRESETS["smoke"].replace(max_steps=2, log_every=1),
        device=torch.device("cpu"),
        dtype="fp32",
        pad_id=loaded.tokenizer.pad_token_id,
    )
    assert stats.steps == 2 and all(loss == loss for _, loss in stats.train_loss)
    for name, p in loaded.model.named_parameters():
        if name not in trainable:
            assert torch.equal(before[name], p.detach()), f"frozen parameter {name} changed"
    assert any(not torch.equal(before[n], p.detach()) for n, p in loaded.model.named_parameters() if n in trainable)

    save_adapter(loaded, tmp_path / "adapter", DATA.labels, {"max_length": 64})
    reloaded, tokenizer, labels2, meta = load_adapter(tmp_path / "adapter")
    assert labels2 == DATA.labels and meta["family"] == family
    input_ids, mask = collate(ids[:5], tokenizer.pad_token_id, 8, 64)
    loaded.model.eval()
    with torch.no_grad():
        expected = loaded.model(input_ids=input_ids, attention_mask=mask).logits
        got = reloaded(input_ids=input_ids, attention_mask=mask).logits
    assert_same_math(got, expected, 64, 8)  # the same fp32 math, rebuilt: 64-token rows, 2 layers (tests/numerics.py)


def test_padding_does_not_change_the_prediction(tmp_path):
    texts = [e.text for e in DATA.train]
    loaded = load_base("tiny-gemma4", 7, work_dir=tmp_path / "b", tokenizer_texts=texts)
    ids = encode(loaded.tokenizer, texts[:3], 64)
    loaded.model.eval().double()  # float64: padding changes only which terms are summed (tests/numerics.py)
    with torch.no_grad():
        tight = loaded.model(*collate(ids, 0, 1, 64)).logits
        padded = loaded.model(*collate(ids, 0, 32, 64)).logits
    assert_same_math(padded, tight, 64, 8)


def test_missing_family_is_reported_clearly(tmp_path, monkeypatch):
    real = models._hf()

    class WithoutGemma4:  # a transformers release that predates Gemma 4
        def __getattr__(self, name):
            if name.startswith("Gemma4"):
                raise AttributeError(name)
            return getattr(real, name)

    monkeypatch.setattr(models, "_hf", WithoutGemma4)
    with pytest.raises(UnsupportedFamily, match=r"transformers .* has no Gemma4Text.*gemma4_text.*not supported"):
        load_base("tiny-gemma4", 7, work_dir=tmp_path, tokenizer_texts=["a b c"] * 20)


@pytest.mark.parametrize("model_id,family", [("tiny-gemma3", "gemma3_text"), ("tiny-gemma4", "gemma4_text")])
def test_hub_loading_path_with_local_files(tmp_path, model_id, family):
    """The hub-id/local-path loader, fed a checkpoint directory written by transformers' save_pretrained."""
    texts = [e.text for e in DATA.train]
    load_base(model_id, 7, work_dir=tmp_path / "ckpt", tokenizer_texts=texts)  # writes weights + tokenizer
    again = load_base(str(tmp_path / "ckpt"), 7, torch_dtype=torch.bfloat16)
    assert again.family == family and again.tokenizer.pad_token_id == 0
    assert {p.dtype for n, p in again.model.named_parameters() if "score" not in n} == {torch.bfloat16}
    ids = torch.tensor([encode(again.tokenizer, ["我很害怕"], 16)[0]])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert again.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.shape == (1, 7)
    with pytest.raises(models.ModelError, match="cannot load"):
        load_base(str(tmp_path / "nothing-here"), 7)


def test_peak_table_and_mfu():
    assert peak_tflops("AMD Instinct MI250X / MI250") == 191.5
    assert peak_tflops("AMD Instinct MI300X") == 1307.0
    assert peak_tflops("NVIDIA H200") == 989.0 and peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert peak_tflops("NVIDIA H100 PCIe") is None and peak_tflops(None) is None
    assert mfu(1000.0, 2_000_000_000, 989.0) == pytest.approx(1000 * 4 * 2e9 / 989e12)
    assert mfu(1000.0, 10, None) is None


def test_macro_f1():
    assert macro_f1([0, 1, 1], [0, 1, 0], 2) == pytest.approx((2 / 3 + 2 / 3) / 2)
    assert macro_f1([0, 0], [0, 0], 3) == pytest.approx(1 / 3)


def test_bucketing_covers_every_sample_with_few_shapes():
    lengths = [int(x) for x in torch.randint(5, 500, (800,), generator=torch.Generator().manual_seed(0))]
    batches = train_batches(lengths, 16, seed=0, bucket_batches=50)
    assert sorted(i for b in batches for i in b) == list(range(800))
    widths = {padded_length(max(lengths[i] for i in b), 64, 512) for b in batches}
    assert widths <= set(range(64, 513, 64))
    waste = sum(padded_length(max(lengths[i] for i in b), 64, 512) * len(b) for b in batches) / sum(lengths)
    plain = train_batches(lengths, 16, seed=0, bucket_batches=1)
    plain_waste = sum(max(lengths[i] for i in b) * len(b) for b in plain) / sum(lengths)
    assert waste < plain_waste


def test_attention_flops_match_the_matmuls_a_real_forward_and_backward_runs():
    """PaLM appendix B's 12 x heads x head_dim x T per token and layer equals the QK^T / AV batched matmuls that
    eager attention really runs (forward + backward) on a tiny Gemma 4 whose global layer has a wider head_dim."""
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    from workload.training.metrics import attention_flops, attention_layers, mfu_from_flops

    config = transformers.Gemma4TextConfig(
        vocab_size=100,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        global_head_dim=32,
        hidden_size_per_layer_input=8,
        vocab_size_per_layer_input=100,
        sliding_window=16,
        layer_types=["sliding_attention", "full_attention"],
    )
    torch.manual_seed(0)
    backbone = transformers.Gemma4TextModel._from_config(config, attn_implementation="eager")
    model = apply_lora(models.LastTokenClassifier(backbone, 7), 4, 8, 0.0, ("q_proj", "k_proj", "v_proj", "o_proj"))
    layers = attention_layers(model)
    assert layers == [(4 * 16, 16), (4 * 32, None)]
    n = 12  # within the sliding window: eager attention computes the whole n x n block in both layers
    ids = torch.randint(3, 100, (1, n))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.sum().backward()
    bmm = sum(v for op, v in counter.get_flop_counts()["Global"].items() if "bmm" in str(op))
    assert bmm == attention_flops([n], layers) == 12 * (64 + 128) * n * n
    # Past the window, the sliding layer counts only the window; the global layer the whole sample.
    assert attention_flops([40], layers) == 12 * 64 * 40 * 16 + 12 * 128 * 40 * 40
    assert mfu_from_flops(989e12 / 2, 989.0) == pytest.approx(0.5) and mfu_from_flops(1.0, None) is None
