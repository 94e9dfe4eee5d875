"""varlen.py's glue around the kernels, on the CPU: layouts, head sharing, the sliding window, the kernel
chosen by head size and the dtype rules.

The varlen kernels exist on GPUs only. Here the two aten operators they call are given CPU implementations for
the length of a test (`torch.library`): a float32 per-sequence softmax attention that also keeps the real
kernels' limits (Flash: head_dim <= 256, no dropout; memory-efficient: equal head counts, no window). Every output
is compared with an independent float64 attention computed from the position ids, so a glue error (a window off by
one, a wrong layout, a lost head repeat) shows here; the kernels' own numbers are the GPU tests' business
(tests/workload/test_workload_varlen.py, on the H200)."""

import importlib
import sys

import pytest
import torch

from workload.training import varlen
from workload.training.batching import collate_packed
from workload.training.loop import autocast
from workload.training.speed import packed_logits
from workload.training.varlen import cu_seqlens, sequence_count, varlen_attention, varlen_attention_on

from tests.workload.test_workload_speed import PAD, _model
from tests.workload.test_workload_varlen import _long_data

CALLS: list[str] = []


def _attend(q, k, v, starts, scale, left, right):
    """(T, H, D) float32 attention within each [start, end) of `starts`: key j is seen from query i when
    i - left <= j <= i + right (a negative bound: unlimited on that side)."""
    out = torch.zeros(q.shape, dtype=torch.float32)
    for a, b in zip(starts, starts[1:]):
        if b <= a:
            continue
        qs, ks, vs = (t[a:b].float().transpose(0, 1) for t in (q, k, v))
        i = torch.arange(b - a)
        seen = torch.ones(b - a, b - a, dtype=torch.bool)
        if left >= 0:
            seen &= i[None, :] >= i[:, None] - left
        if right >= 0:
            seen &= i[None, :] <= i[:, None] + right
        scores = (qs @ ks.transpose(1, 2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
        out[a:b] = (scores.masked_fill(~seen, float("-inf")).softmax(-1) @ vs).transpose(0, 1)
    return out


def _flash_cpu(
    q,
    k,
    v,
    cu_q,
    cu_k,
    max_q,
    max_k,
    dropout_p,
    is_causal,
    return_debug_mask,
    *,
    scale=None,
    window_size_left=None,
    window_size_right=None,
    seqused_k=None,
    alibi_slopes=None,
    block_table=None,
    num_splits=None,
):
    CALLS.append("flash")
    assert q.shape[-1] <= 256, "Flash Attention takes head_dim <= 256"
    assert dropout_p == 0.0 and torch.equal(cu_q, cu_k) and q.shape[1] % k.shape[1] == 0
    groups = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(groups, 1) for t in (k, v))
    left = -1 if window_size_left is None else window_size_left
    right = 0 if is_causal else (-1 if window_size_right is None else window_size_right)
    out = _attend(q, k, v, cu_q.tolist(), scale, left, right).to(q.dtype)
    return (
        out,
        torch.zeros(q.shape[1], q.shape[0]),
        torch.zeros(2, dtype=torch.int64),
        torch.zeros(()),
        torch.zeros(()),
    )


def _efficient_cpu(
    q,
    k,
    v,
    bias,
    cu_q,
    cu_k,
    max_q,
    max_k,
    dropout_p,
    custom_mask_type,
    compute_log_sumexp=False,
    *,
    scale=None,
    seqlen_k=None,
    window_size=None,
):
    CALLS.append("efficient")
    assert q.shape[0] == 1 and bias is None and dropout_p == 0.0 and window_size is None
    assert k.shape[2] == q.shape[2], "the memory-efficient kernel has no head sharing"
    right = -1 if custom_mask_type == 0 else 0  # 1 and 2: causal (from the top left / bottom right; equal lengths)
    out = _attend(q[0], k[0], v[0], cu_q.tolist(), scale, -1, right).to(q.dtype)[None]
    return out, torch.zeros(1, q.shape[2], q.shape[1]), torch.zeros(()), torch.zeros(()), max_q, max_k


@pytest.fixture
def cpu_kernels():
    library = torch.library.Library("aten", "IMPL")
    library.impl("_flash_attention_forward", _flash_cpu, "CPU")
    library.impl("_efficient_attention_forward", _efficient_cpu, "CPU")
    CALLS.clear()
    yield CALLS
    library._destroy()


def _reference(query, key, value, position_ids, scale, window):
    """float64 (batch, seq, heads, dim) attention of packed rows, each sample attending causally to its own
    earlier tokens (position ids restart at 0 for each), within the last `window` positions when one is given."""
    b, h, s, d = query.shape
    pos = position_ids.reshape(b, s)
    sample = (pos == 0).cumsum(1)
    i = torch.arange(s)
    seen = (sample[:, :, None] == sample[:, None, :]) & (i[None, None, :] <= i[None, :, None])
    if window:
        seen &= i[None, None, :] > i[None, :, None] - window
    k, v = (t.double().repeat_interleave(h // t.shape[1], 1) for t in (key, value))
    scores = query.double() @ k.transpose(-1, -2) * scale
    return (scores.masked_fill(~seen[:, None], float("-inf")).softmax(-1) @ v).transpose(1, 2)


def _packed(head_dim, heads=4, kv_heads=2, dtype=torch.bfloat16):
    ids, _ = _long_data()
    rows = [[0, 1, 2], [3, 4, 5, 6], [7]]
    _, pos, _ = collate_packed([[ids[i] for i in r] for r in rows], PAD, 256, 3)
    cu = cu_seqlens(pos, sequence_count([[len(ids[i]) for i in r] for r in rows], 256, 3))
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, n, 256, head_dim, generator=gen).to(dtype) for n in (heads, kv_heads, kv_heads))
    return q, k, v, pos, cu


@pytest.mark.parametrize(
    "head_dim, window, kernel",
    [
        (16, None, "flash"),
        (16, 16, "flash"),
        (32, 5, "flash"),
        (256, None, "flash"),
        (257, None, "efficient"),
        (512, None, "efficient"),
    ],
)
def test_each_sample_attends_to_its_own_earlier_tokens_within_the_window(cpu_kernels, head_dim, window, kernel):
    q, k, v, pos, cu = _packed(head_dim)
    scale = 0.3
    out, weights = varlen_attention(
        None, q, k, v, None, scaling=scale, sliding_window=window, cu_seq_lens_q=cu, max_length_q=256
    )
    assert weights is None and out.shape == (3, 256, 4, head_dim) and out.dtype == torch.bfloat16
    assert cpu_kernels == [kernel]
    expected = _reference(q, k, v, pos, scale, window)
    assert (out.double() - expected).abs().max().item() <= 1e-2 * expected.abs().max().item()


def test_a_window_one_wider_or_narrower_is_a_different_attention(cpu_kernels):
    """The test above can see a window off by one: the references for windows 15 and 17 differ from 16's."""
    q, k, v, pos, _ = _packed(16)
    at_16 = _reference(q, k, v, pos, 0.3, 16)
    for other in (15, 17):
        assert (_reference(q, k, v, pos, 0.3, other) - at_16).abs().max().item() > 0.05 * at_16.abs().max().item()


def test_fp32_activations_run_at_the_autocast_precision_and_plain_fp32_is_refused(cpu_kernels):
    q, k, v, pos, cu = _packed(16, dtype=torch.float32)
    with pytest.raises(TypeError, match="bf16/fp16 inputs, not torch.float32"):
        varlen_attention(None, q, k, v, None, scaling=0.25, cu_seq_lens_q=cu)
    assert cpu_kernels == []
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = varlen_attention(None, q, k, v, None, scaling=0.25, cu_seq_lens_q=cu)
    assert out.dtype == torch.bfloat16
    expected = _reference(q.bfloat16(), k.bfloat16(), v.bfloat16(), pos, 0.25, None)
    assert (out.double() - expected).abs().max().item() <= 1e-2 * expected.abs().max().item()


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(cu_seq_lens_q=None), ValueError, "packed batches only"),
        (dict(dropout=0.1), NotImplementedError, "no attention dropout or logit softcapping"),
        (dict(softcap=30.0), NotImplementedError, "no attention dropout or logit softcapping"),
    ],
)
def test_what_the_kernels_cannot_do_is_refused_before_they_run(cpu_kernels, kwargs, error, message):
    q, k, v, _, cu = _packed(16)
    with pytest.raises(error, match=message):
        varlen_attention(None, q, k, v, None, **{"cu_seq_lens_q": cu, **kwargs})
    assert cpu_kernels == []


def test_a_large_head_with_a_sliding_window_has_no_kernel(cpu_kernels):
    q, k, v, _, cu = _packed(512)
    with pytest.raises(NotImplementedError, match="head_dim 512 with a sliding window"):
        varlen_attention(None, q, k, v, None, sliding_window=16, cu_seq_lens_q=cu)
    assert cpu_kernels == []


@pytest.mark.parametrize("global_head_dim, kernels", [(16, {"flash"}), (512, {"flash", "efficient"})])
def test_the_model_through_varlen_is_as_accurate_as_the_masked_packed_path(cpu_kernels, global_head_dim, kernels):
    """The tiny Gemma 4 (a sliding layer and a global one) on packed rows under bf16 autocast, with transformers'
    masks and with the switch on: what transformers hands the attention function (scaling, window, cu_seqlens)
    reaches the kernels right when the varlen logits are as close to the float64 masked logits as the bf16 masked
    path's own (both round to bf16 at every layer; a factor 2 between two such paths, measured 0.7-1.4 here)."""
    model = _model("gemma4_text", global_head_dim=global_head_dim).eval()
    ids, _ = _long_data()
    rows = [[0, 1, 2], [3, 4, 5, 6], [7]]
    batch = collate_packed([[ids[i] for i in r] for r in rows], PAD, 256, 3)
    cu = cu_seqlens(batch[1], sequence_count([[len(ids[i]) for i in r] for r in rows], 256, 3))
    with torch.no_grad():
        truth = packed_logits(model.double(), *batch)
        model.float()
        with autocast(torch.device("cpu"), "bf16"):
            masked = packed_logits(model, *batch).double()
            with varlen_attention_on(model):
                through = packed_logits(model, *batch, cu_seqlens=cu).double()
    assert set(cpu_kernels) == kernels
    assert (through - truth).abs().max().item() <= 2 * (masked - truth).abs().max().item()


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (6, 2), (3, 1)])  # 4 - 2 == 4 // 2: the others tell them apart
def test_on_a_torch_whose_varlen_attn_cannot_share_heads_the_glue_repeats_them(
    cpu_kernels, monkeypatch, heads, kv_heads
):
    """torch 2.11 (the H200's) has no `enable_gqa` in varlen_attn: key/value heads are repeated before the call."""
    monkeypatch.setattr(varlen, "_flash_takes_gqa", lambda: False)
    seen = []
    module = importlib.import_module("torch.nn.attention.varlen")
    real = module.varlen_attn

    def without_gqa(q, k, v, *args, **kwargs):
        assert "enable_gqa" not in kwargs
        seen.append((q.shape[1], k.shape[1], v.shape[1]))
        return real(q, k, v, *args, **kwargs)

    monkeypatch.setattr(module, "varlen_attn", without_gqa)
    q, k, v, pos, cu = _packed(16, heads=heads, kv_heads=kv_heads)
    out, _ = varlen_attention(None, q, k, v, None, scaling=0.3, sliding_window=16, cu_seq_lens_q=cu, max_length_q=256)
    assert seen == [(heads, heads, heads)]
    expected = _reference(q, k, v, pos, 0.3, 16)
    assert (out.double() - expected).abs().max().item() <= 1e-2 * expected.abs().max().item()


def test_a_torch_without_the_varlen_module_says_so(monkeypatch):
    """What a packed run records as varlen_error on a GPU whose torch predates torch.nn.attention.varlen."""
    assert varlen.varlen_available() is None  # this torch has it
    monkeypatch.setitem(sys.modules, "torch.nn.attention.varlen", None)  # import now raises ImportError
    why = varlen.varlen_available()
    assert why.startswith(f"torch {torch.__version__} has no torch.nn.attention.varlen (") and "varlen" in why[-40:]
