"""Training-speed levers (docs/workload.md, "Training speed"): each gives the plain path's results.

Tiny random Gemma classifiers on the CPU, fp32, LoRA dropout 0 (so that two paths draw no different masks)."""

import dataclasses
import math
import random

import pytest
import torch
import torch.nn.functional as F

from numerics import assert_same_math, fp32_loss_rtol
from workload.model.classifier import apply_lora, make_trainable_fp32
from workload.training.batching import (
    collate,
    collate_packed,
    pack_sample_rows,
    packed_steps,
    token_budget_batches,
)
from workload.training.loop import Tokenised, evaluate, plan_epoch, scaled_schedule, train
from workload.training.presets import PACKED_SEED, PRESETS
from workload.training.speed import compile_layers, decoder_layers, packed_logits, uncompile_layers

CPU = torch.device("cpu")
# The GPU rows run where torch sees one (on the H200: `pytest --noconftest tests/workload/test_workload_speed.py`).
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
GPU_ONLY = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (CUDA or ROCm)")
PAD, EOS, BOS = 0, 1, 2


def _lengths(n, seed=0):
    rng = random.Random(seed)
    return [int(min(200, max(4, rng.lognormvariate(3.2, 0.8)))) for _ in range(n)]


def _data(n_train=96, n_eval=32, vocab=300):
    rng = random.Random(1)

    def rows(n):
        ids = [[BOS] + [rng.randrange(10, vocab) for _ in range(n - 2)] + [EOS] for n in _lengths(n, rng.random())]
        return ids, [x[1] % 7 for x in ids]  # label: a function of the first word, learnable

    (tr, trl), (ev, evl) = rows(n_train), rows(n_eval)
    return Tokenised(tr, trl, ev, evl)


def _model(family="gemma", seed=0, global_head_dim=16):
    import transformers

    common = dict(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
    )
    torch.manual_seed(seed)
    if family == "gemma4_text":
        from workload.model.classifier import LastTokenClassifier

        config = transformers.Gemma4TextConfig(
            **common,
            global_head_dim=global_head_dim,
            hidden_size_per_layer_input=8,
            vocab_size_per_layer_input=300,
            sliding_window=16,
            layer_types=["sliding_attention", "full_attention"],
        )
        base = LastTokenClassifier(transformers.Gemma4TextModel._from_config(config, attn_implementation="sdpa"), 7)
    else:
        config = transformers.GemmaConfig(**common, num_labels=7)
        base = transformers.GemmaForSequenceClassification._from_config(config, attn_implementation="sdpa")
    model = apply_lora(base, 8, 16, 0.0, ("q_proj", "k_proj", "v_proj", "o_proj"))
    make_trainable_fp32(model)
    return model


def _recipe(**changes):
    base = PRESETS["seed"].replace(
        dtype="fp32",
        lora_dropout=0.0,
        log_every=1,
        max_steps=4,
        epochs=1,
        warmup_steps=2,
        learning_rate=2e-3,
        max_length=256,
    )
    import dataclasses

    plain = {
        "compile": False,
        "bucket_lengths": None,
        "micro_batch_tokens": None,
        "graph_steps": False,
        "pack_samples": None,
        "varlen_attention": False,
    }
    return dataclasses.replace(base, **{**plain, **changes})


def _run(recipe, family="gemma", data=None, device=CPU, dtype=torch.float64, compile_backend=None):
    """4 steps of `train` and an eval. float64 by default (dtype="fp32" below only means no autocast): the
    levers compared with `_assert_same` change summation order, and float64 keeps that below any real bug."""
    data = data or _data()
    model = _model(family).to(device, dtype)
    stats = train(model, data, recipe, device=device, dtype="fp32", pad_id=PAD, compile_backend=compile_backend)
    ev = evaluate(
        model, data.eval_ids, data.eval_labels, device=device, dtype="fp32", pad_id=PAD, recipe=recipe, num_labels=7
    )
    return [loss for _, loss in stats.train_loss], ev, stats


# At most 256 samples in a 1024-token step (4 tokens or more each), 4 steps.
SAMPLES_PER_STEP, STEPS = 256, 4


def _assert_same(a, b):
    """Same losses and eval up to rounding (tests/numerics.py): the float64 runs' fp32 loss bounds it, absolute
    on losses of ~2."""
    tol = 2 * 2 * fp32_loss_rtol(SAMPLES_PER_STEP, STEPS)
    (la, eva, _), (lb, evb, _) = a, b
    assert len(la) == len(lb) == 4
    assert max(abs(x - y) for x, y in zip(la, lb)) < tol, (la, lb)
    assert abs(eva["loss"] - evb["loss"]) < tol and eva["accuracy"] == evb["accuracy"]


def test_packed_steps_cover_every_sample_once_in_nearly_full_rows():
    lengths = _lengths(3000)
    steps = packed_steps(lengths, 256, 4, seed=3)
    flat = [i for step in steps for row in step for i in row]
    assert sorted(flat) == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in row) <= 256 for step in steps for row in step)
    assert sum(len(step) != 4 for step in steps) <= 1  # only the last step may be short
    assert sum(lengths) / (256 * sum(len(step) for step in steps)) > 0.9  # rows are nearly full
    assert packed_steps(lengths, 256, 4, seed=3) == steps and packed_steps(lengths, 256, 4, seed=4) != steps
    with pytest.raises(ValueError, match="does not fit"):
        packed_steps([300], 256, 4, seed=0)


def test_token_budget_batches_use_few_shapes_within_budget():
    lengths = _lengths(2000)
    buckets = (32, 64, 128, 256)
    batches = token_budget_batches(lengths, 1024, buckets, seed=0)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        width = next(w for w in buckets if w >= max(lengths[i] for i in b))
        assert len(b) <= 1024 // width and all(lengths[i] <= width for i in b)
    shapes = {(len(b), next(w for w in buckets if w >= max(lengths[i] for i in b))) for b in batches}
    assert len(shapes) <= 2 * len(buckets)  # one full shape per bucket plus each bucket's last batch


def test_collate_packed_restarts_positions_and_marks_sample_ends():
    rows = [[[5, 6, 7], [8, 9]], [[4]]]
    ids, pos, ends = collate_packed(rows, PAD, 6, 3)
    assert ids.tolist() == [[5, 6, 7, 8, 9, 0], [4, 0, 0, 0, 0, 0], [0] * 6]
    assert pos.tolist() == [[0, 1, 2, 0, 1, 0], [0, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5]]
    assert ends.tolist() == [2, 4, 6]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["gemma", "gemma4_text"])
def test_packed_forward_equals_padded_forward_logits_and_gradients(family, device):
    data = _data(n_train=12)
    # float64 on the CPU (summation order alone differs); the GPU rows keep fp32 and the tolerance they were run
    # with on the H200 (its varlen kernels take no float64)
    model = _model(family).to(device, torch.float64 if device == "cpu" else torch.float32)
    samples = list(range(12))
    rows = [samples[:5], samples[5:9], samples[9:]]
    assert max(sum(len(data.train_ids[i]) for i in r) for r in rows) <= 512
    ids, pos, ends = collate_packed([[data.train_ids[i] for i in r] for r in rows], PAD, 512, 4)
    packed = packed_logits(model, ids.to(device), pos.to(device), ends.to(device))
    order = [i for r in rows for i in r]
    pids, mask = collate([data.train_ids[i] for i in order], PAD, 8, 512)
    padded = model(input_ids=pids.to(device), attention_mask=mask.to(device)).logits

    def same(got, want):
        if device == "cpu":
            assert_same_math(got, want, 512, 32)  # 512-token rows, 2 layers forward and backward
        else:
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)

    same(packed, padded)
    target = torch.tensor([data.train_labels[i] for i in order], device=device)
    grads = []
    for logits in (packed, padded):
        model.zero_grad()
        F.cross_entropy(logits, target).backward(retain_graph=True)
        grads.append([p.grad.clone() for p in model.parameters() if p.requires_grad])
    for a, b in zip(*grads):
        same(a, b)


def test_packed_sample_rows_hold_every_sample_once_within_the_cap_in_few_rows():
    lengths = _lengths(400, seed=2)
    for start in range(0, 400, 16):
        samples = list(range(start, start + 16))
        rows = pack_sample_rows(lengths, samples, 256)
        assert sorted(i for row in rows for i in row) == samples
        assert all(sum(lengths[i] for i in row) <= 256 for row in rows)
        # first-fit decreasing: no two rows could have been one
        sums = sorted(sum(lengths[i] for i in row) for row in rows)
        assert len(sums) < 2 or sums[0] + sums[1] > 256
    with pytest.raises(ValueError, match="does not fit"):
        pack_sample_rows([300, 4], [0, 1], 256)


def test_a_pad_tail_restarts_its_positions_every_tail_chunk():
    ids, pos, ends = collate_packed([[[5, 6, 7]]], PAD, 12, 1, tail_chunk=4)
    assert pos.tolist() == [[0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 0]]
    assert ids.tolist() == [[5, 6, 7] + [PAD] * 9] and ends.tolist() == [2]


def test_packed_sample_steps_reproduce_padded_losses_on_the_same_steps():
    """Each step's 16 samples packed into rows of at most 256 tokens (several rows, so several micro-batches per
    step), each row padded to 128 or 256: the padded path's losses and eval (masks from the position ids on the
    CPU)."""
    plain = _run(_recipe())
    packed = _run(_recipe(pack_samples=(128, 256)))
    _assert_same(plain, packed)
    assert packed[2].packed and not plain[2].packed
    assert packed[2].padded_tokens < plain[2].padded_tokens
    assert packed[2].padded_tokens % 128 == 0


def test_packed_sample_steps_are_laid_out_one_row_per_micro_batch_at_the_smallest_width():
    from workload.training.loop import micro_batches

    lengths = _lengths(64, seed=4)
    recipe = _recipe(pack_samples=(128, 256, 512), max_length=256)
    steps = plan_epoch(lengths, recipe, seed=0)
    assert [s.samples for s in steps] == [s.samples for s in plan_epoch(lengths, _recipe(max_length=256), seed=0)]
    for step in steps:
        micros = micro_batches(step, lengths, recipe)
        assert [m["rows"] for m in micros] == [[row] for row in step.rows]
        for m in micros:
            used = sum(lengths[i] for i in m["rows"][0])
            assert m["width"] == next(w for w in (128, 256, 512) if w >= used) and m["tail_chunk"] == 256
    with pytest.raises(ValueError, match="longer than max_length"):
        plan_epoch(lengths, _recipe(pack_samples=(128, 256, 512), max_length=64), seed=0)
    with pytest.raises(ValueError, match="not with pack or tokens_per_step"):
        plan_epoch(lengths, _recipe(pack_samples=(256,), tokens_per_step=512), seed=0)


def test_packed_sample_steps_run_padded_where_varlen_cannot_run_or_under_ddp():
    """On the CPU packed samples with varlen attention asked for (`PACKED_SEED`) run as the padded steps, and the
    run says why; under DDP too."""
    from workload.training.loop import _unpack_samples

    asked = _run(_recipe(pack_samples=(128, 256), varlen_attention=True))
    assert not asked[2].packed and "CPU" in asked[2].varlen_error
    _assert_same(_run(_recipe()), asked)
    seed = dataclasses.replace(PRESETS["seed"], **PACKED_SEED)
    assert _unpack_samples(seed, torch.device("cuda"), "bf16", 2)[1] == "packed sample steps run in one process"
    assert _unpack_samples(seed, torch.device("cuda"), "fp32", 1)[0].pack_samples is None
    assert _unpack_samples(_recipe(pack_samples=(256,)), CPU, "fp32", 1) == (_recipe(pack_samples=(256,)), None)


def test_micro_batches_reproduce_whole_batch_losses():
    _assert_same(_run(_recipe()), _run(_recipe(micro_batch_tokens=128)))


def test_bucket_widths_reproduce_multiple_of_8_padding():
    _assert_same(_run(_recipe(pad_multiple=8)), _run(_recipe(bucket_lengths=(32, 64, 128, 256))))


def test_packing_reproduces_padded_losses_on_the_same_steps():
    budget = dict(tokens_per_step=1024, pack_length=256)
    plain = _run(_recipe(**budget))
    packed = _run(_recipe(**budget, pack=True, micro_batch_tokens=512))
    _assert_same(plain, packed)
    assert packed[2].padded_tokens == 4 * 1024 and plain[2].padded_tokens > 0


@GPU_ONLY
@pytest.mark.parametrize("compiled", [False, True])
def test_graph_steps_reproduce_uncaptured_losses(compiled):
    """Whole steps replayed from captured graphs (one per layout: here 3 widths, one of them as 2 micro-batches)
    give the uncaptured loop's losses, gradient norms and eval: the inputs, the lr schedule and the optimizer
    state reach every replay."""
    import torch._dynamo

    gpu = torch.device("cuda")
    levers = dict(bucket_lengths=(64, 128, 256), micro_batch_tokens=512, compile=compiled, max_steps=6)
    plain = _run(_recipe(**levers), device=gpu, dtype=torch.float32)
    graphed = _run(_recipe(**levers, graph_steps=True), device=gpu, dtype=torch.float32)
    torch._dynamo.reset()
    assert graphed[2].graph_error is None and graphed[2].graphed_layouts >= 2
    (la, eva, sa), (lb, evb, sb) = plain, graphed
    assert max(abs(x - y) for x, y in zip(la, lb)) < 2e-4, (la, lb)
    assert max(abs(x[1] - y[1]) for x, y in zip(sa.grad_norm, sb.grad_norm)) < 2e-3
    assert abs(eva["loss"] - evb["loss"]) < 2e-4 and eva["accuracy"] == evb["accuracy"]


@GPU_ONLY
@pytest.mark.parametrize("compiled", [False, True])
def test_graph_steps_of_packed_samples_reproduce_uncaptured_losses(compiled):
    """The packed seed layout (`PACKED_SEED`) on a GPU: steps of 16 packed samples through the varlen kernels (rows of 128 or 256
    tokens, pad tails cut to max_length), replayed from captured graphs, give the uncaptured loop's losses and
    eval; both give the padded steps' losses within bf16's drift."""
    import torch._dynamo

    gpu = torch.device("cuda")
    levers = dict(compile=compiled, max_steps=6, dtype="bf16", max_length=128)
    packed = dict(pack_samples=(128, 256), varlen_attention=True)
    data = _data()
    data = Tokenised(
        [x[:128] for x in data.train_ids], data.train_labels, [x[:128] for x in data.eval_ids], data.eval_labels
    )
    runs = {}
    for name, recipe in (
        ("padded", _recipe(**levers)),
        ("packed", _recipe(**levers, **packed)),
        ("graphed", _recipe(**levers, **packed, graph_steps=True)),
    ):
        model = _model().to(gpu)
        stats = train(model, data, recipe, device=gpu, dtype="bf16", pad_id=PAD)
        ev = evaluate(
            model, data.eval_ids, data.eval_labels, device=gpu, dtype="bf16", pad_id=PAD, recipe=recipe, num_labels=7
        )
        runs[name] = ([loss for _, loss in stats.train_loss], ev, stats)
    torch._dynamo.reset()
    assert runs["graphed"][2].graph_error is None and runs["graphed"][2].graphed_layouts >= 2
    assert runs["packed"][2].varlen_attention and runs["graphed"][2].varlen_attention
    (la, eva, _), (lb, evb, _) = runs["packed"], runs["graphed"]
    assert max(abs(x - y) for x, y in zip(la, lb)) < 2e-3, (la, lb)
    assert abs(eva["loss"] - evb["loss"]) < 2e-3
    assert max(abs(x - y) for x, y in zip(runs["padded"][0], la)) < 3e-2, (runs["padded"][0], la)


def test_step_layouts_are_captured_once_each_largest_first():
    """`largest_first` orders the distinct layouts by element count (the largest micro-batches first), ties in the
    order they came."""
    from workload.training.step_graphs import largest_first

    small, mid, large, other_mid = ((1, 256), (3,)), ((1, 1024), (9,)), ((2, 2048), (16,)), ((4, 256), (9,))
    assert largest_first([small, mid, small, large, other_mid, mid]) == [large, mid, other_mid, small]
    assert largest_first([]) == []


def test_a_packed_seed_schedule_is_captured_largest_layout_first(monkeypatch):
    """`_capture_steps` hands every layout of a real packed seed schedule (16 samples a step packed into rows of
    256 to 2048 tokens, cu_seqlens as the varlen kernels get them) to the capture once, largest first, whatever
    order the steps come in. The capture itself is recorded here (graphs need a GPU: the GPU test below runs it)."""
    from workload.data.synthetic import synthetic_data
    from workload.training import step_graphs
    from workload.training.loop import StepContext, TrainStats, _capture_steps

    class Recorded(step_graphs.StepGraphs):
        def __init__(self, *_):
            self.graphs, self.order = {}, []

        def capture(self, batches):
            self.order.append(self.layout(batches))
            self.graphs[self.layout(batches)] = None

    monkeypatch.setattr(step_graphs, "StepGraphs", Recorded)
    ids, labels = synthetic_data(16 * 40, 1000, 1, num_labels=7)
    recipe = dataclasses.replace(PRESETS["seed"], **PACKED_SEED)
    schedule = plan_epoch([len(x) for x in ids], recipe, seed=0)
    ctx = StepContext(Tokenised(ids, labels, [], []), recipe, CPU, "bf16", PAD, varlen=True)
    graphs = _capture_steps(None, schedule, ctx, [], None, TrainStats())
    in_schedule = list(
        dict.fromkeys(Recorded.layout([ctx.host_batch(m) for m in ctx.micro_batches(s)]) for s in schedule)
    )
    sizes = [sum(math.prod(shape) for shape in layout) for layout in graphs.order]
    assert sorted(graphs.order) == sorted(in_schedule) and len(in_schedule) > 5  # each layout once
    assert sizes == sorted(sizes, reverse=True) and graphs.order != in_schedule


@GPU_ONLY
def test_capturing_the_largest_layout_first_takes_no_more_memory(monkeypatch):
    """Packed seed steps (rows of 256 to 2048 tokens) of a model big enough that activations fill the graph pool,
    captured in schedule order and largest first (`largest_first`): the peak allocated memory after the capture
    (`memory_peaks`, over what the model held before train()) is not higher largest first. Both are printed
    (pytest -s or -rP)."""
    import gc

    import transformers

    from workload.data.synthetic import synthetic_data
    from workload.training import step_graphs

    gpu = torch.device("cuda")
    config = transformers.GemmaConfig(
        vocab_size=1000,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=1,
        head_dim=128,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
        num_labels=7,
    )
    ids, labels = synthetic_data(16 * 12, 1000, 1, num_labels=7)
    data = Tokenised(ids, labels, ids[:16], labels[:16])
    recipe = _recipe(**PACKED_SEED, graph_steps=True, dtype="bf16", max_length=512, max_steps=12)
    in_schedule_order = lambda layouts: list(dict.fromkeys(layouts))  # noqa: E731 - the order before largest_first
    orders, peaks = {}, {}
    for name, order in (("schedule order", in_schedule_order), ("largest first", step_graphs.largest_first)):
        monkeypatch.setattr(
            step_graphs,
            "largest_first",
            lambda layouts, order=order, name=name: orders.setdefault(name, order(layouts)),
        )
        torch.manual_seed(0)
        base = transformers.GemmaForSequenceClassification._from_config(config, attn_implementation="sdpa")
        model = apply_lora(base, 64, 16, 0.0, ("q_proj", "k_proj", "v_proj", "o_proj")).to(gpu, torch.bfloat16)
        make_trainable_fp32(model)
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        stats = train(model, data, recipe, device=gpu, dtype="bf16", pad_id=PAD)
        assert stats.graph_error is None and stats.varlen_attention and stats.graphed_layouts == len(orders[name])
        peaks[name] = tuple(peak - before for peak in stats.memory_peaks["capture"])
        print(
            f"{name}: {stats.graphed_layouts} layouts, peak allocated {peaks[name][0] / 2**20:.1f} MiB, "
            f"reserved {peaks[name][1] / 2**20:.1f} MiB after the capture, over the model's"
        )
        del model, base, stats
    assert orders["schedule order"] != orders["largest first"]  # the schedule does not start with its largest
    assert peaks["largest first"][0] <= peaks["schedule order"][0], peaks


def test_optimizer_state_made_before_capture_changes_nothing():
    """`init_optimizer_state` (a zero-gradient step at lr 0, step counts reset) leaves the parameters as they were,
    and the next real step equals a fresh optimizer's first step (bias correction from step 1)."""
    from workload.training.step_graphs import init_optimizer_state

    torch.manual_seed(0)
    weights = [torch.randn(5, 3), torch.randn(7)]
    grads = [torch.randn(5, 3), torch.randn(7)]
    runs = []
    for prepare in (False, True):
        params = [torch.nn.Parameter(w.clone()) for w in weights]
        opt = torch.optim.AdamW(params, lr=torch.tensor(0.1), weight_decay=0.01)
        if prepare:
            init_optimizer_state(opt, params)
            assert all(torch.equal(p, w) for p, w in zip(params, weights)) and all(p.grad is None for p in params)
            assert opt.param_groups[0]["lr"].item() == pytest.approx(0.1)
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        runs.append([p.detach().clone() for p in params])
    assert not torch.equal(runs[0][0], weights[0])
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_packing_falls_back_to_padded_steps_where_transformers_cannot_mask_it(monkeypatch):
    import workload.training.loop as train_module

    budget = dict(tokens_per_step=1024, pack_length=256, pack=True)
    packed = _run(_recipe(**budget))
    monkeypatch.setattr(train_module, "packing_supported", lambda: False)
    fallback = _run(_recipe(**budget))
    assert packed[2].packed and not fallback[2].packed
    _assert_same(packed, fallback)


def test_compiled_layers_reproduce_eager_losses(monkeypatch):
    """The compile path (regional compile, warm-up outside the timing, eager again afterwards) with the quick
    aot_eager backend on the CPU; inductor itself runs in the GPU benchmark (bench/train_throughput.py)."""
    import torch._dynamo

    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()  # graphs compiled by earlier tests in the same process
    budget = dict(tokens_per_step=1024, pack_length=256, pack=True)
    eager = _run(_recipe(**budget))
    assert not counters["stats"]["unique_graphs"]
    compiled = _run(_recipe(**budget, compile=True), compile_backend="aot_eager")  # the CPU path, quickly
    assert counters["stats"]["unique_graphs"] >= 1  # the layers really ran as captured graphs
    _assert_same(eager, compiled)
    assert compiled[2].warmup_seconds > 0 and eager[2].warmup_seconds == 0
    torch._dynamo.reset()


def test_a_failing_compiler_falls_back_to_eager_and_is_recorded(monkeypatch):
    import torch._dynamo

    import workload.training.loop as train_module

    def broken_backend(gm, example_inputs):
        raise RuntimeError("no compiler for this GPU")

    real = train_module.compile_layers
    monkeypatch.setattr(train_module, "compile_layers", lambda model, backend: real(model, backend=broken_backend))
    torch._dynamo.reset()
    budget = dict(tokens_per_step=1024, pack_length=256, pack=True)
    fallback = _run(_recipe(**budget, compile=True), compile_backend="broken")
    torch._dynamo.reset()
    _assert_same(_run(_recipe(**budget)), fallback)
    assert "no compiler for this GPU" in fallback[2].compile_error


def test_a_wheel_whose_compile_needs_a_gpu_trains_eager_on_a_host_without_one(monkeypatch):
    """ENVBUILD_TORCH_COMPILE_NEEDS_GPU (set by envbuild for torch 2.13.0+rocm7.2, whose torch.compile raises
    "Can't detect vectorized ISA for CPU" with no GPU, pytorch/pytorch#189194): on the CPU the run compiles nothing,
    trains eager with the same losses and records why; without the variable the same request compiles."""
    import torch._dynamo

    from torch._dynamo.utils import counters

    budget = dict(tokens_per_step=1024, pack_length=256, pack=True)
    monkeypatch.setenv(
        "ENVBUILD_TORCH_COMPILE_NEEDS_GPU", "torch 2.13.0+rocm7.2: no CPU compile (pytorch/pytorch#189194)"
    )
    torch._dynamo.reset()
    counters.clear()
    eager = _run(_recipe(**budget, compile=True), compile_backend="aot_eager")
    assert not counters["stats"]["unique_graphs"]
    assert eager[2].compile_error == (
        "unavailable in this image: no GPU on this host: torch 2.13.0+rocm7.2: no CPU compile (pytorch/pytorch#189194)"
    )
    _assert_same(_run(_recipe(**budget)), eager)
    monkeypatch.delenv("ENVBUILD_TORCH_COMPILE_NEEDS_GPU")
    compiled = _run(_recipe(**budget, compile=True), compile_backend="aot_eager")
    assert counters["stats"]["unique_graphs"] >= 1 and compiled[2].compile_error is None
    torch._dynamo.reset()


def test_compile_layers_wraps_every_decoder_layer_and_undoes_it():
    model = _model()
    assert compile_layers(model, backend="eager") == 2 == len(decoder_layers(model))
    assert all(layer._compiled_call_impl is not None for layer in decoder_layers(model))
    uncompile_layers(model)
    assert all(layer._compiled_call_impl is None for layer in decoder_layers(model))


def test_lr_scales_with_sqrt_of_samples_per_step_and_warmup_keeps_samples():
    data = _data(n_train=400)
    recipe = _recipe(
        tokens_per_step=2048, pack_length=256, pack=True, lr_scaling="sqrt", learning_rate=2e-4, warmup_steps=100
    )
    steps = plan_epoch([len(x) for x in data.train_ids], recipe, seed=0)
    mean = sum(len(s.samples) for s in steps) / len(steps)
    lr, warmup = scaled_schedule(recipe, steps)
    assert mean > 16 and lr == pytest.approx(2e-4 * (mean / 16) ** 0.5)
    assert warmup == round(100 * 16 / mean)
    assert scaled_schedule(recipe.replace(lr_scaling="linear"), steps)[0] == pytest.approx(2e-4 * mean / 16)


def test_presets_and_bad_combinations():
    seed, fast = PRESETS["seed"], PRESETS["throughput"]
    assert seed.batch_size == 16 and seed.tokens_per_step is None and seed.micro_batch_tokens == 2048
    assert seed.graph_steps and not fast.graph_steps
    assert seed.pack_samples is None and fast.pack_samples is None and PRESETS["speed"].pack_samples is None
    # Where whole-step graphs cannot run, the run goes on uncaptured and says why.
    from workload.training.loop import _graphs_unsupported

    packed_seed = dataclasses.replace(seed, **PACKED_SEED)
    assert _graphs_unsupported(packed_seed, "bf16", 1) is None  # packed sample steps are captured as graphs
    assert max(packed_seed.pack_samples) == seed.micro_batch_tokens and packed_seed.varlen_attention

    assert _graphs_unsupported(seed, "bf16", 1) is None
    assert "packed" in _graphs_unsupported(fast, "bf16", 1) and "fp16" in _graphs_unsupported(seed, "fp16", 1)
    assert "ranks" in _graphs_unsupported(seed, "bf16", 2)
    assert fast.tokens_per_step and fast.pack and fast.lr_scaling == "sqrt" and fast.bucket_lengths is None
    lengths = [10] * 20
    with pytest.raises(ValueError, match="tokens_per_step"):
        plan_epoch(lengths, _recipe(pack=True), seed=0)
    with pytest.raises(ValueError, match="pack_length"):
        plan_epoch(lengths, _recipe(tokens_per_step=512, pack=True, pack_length=128, max_length=256), seed=0)
    with pytest.raises(ValueError, match="reduce_sum"):
        train(
            _model(),
            _data(n_train=8),
            _recipe(tokens_per_step=512, pack=True, pack_length=256),
            device=CPU,
            dtype="fp32",
            pad_id=PAD,
            ddp_world=2,
        )


def _packed_rank(rank, world, port, out):
    import json
    import os
    import torch.distributed as td
    from torch.nn.parallel import DistributedDataParallel

    td.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)

    def reduce_sum(t):
        t = t.clone()
        td.all_reduce(t)
        return t

    recipe = _recipe(tokens_per_step=1024, pack_length=256, pack=True, micro_batch_tokens=256)
    model = DistributedDataParallel(_model().double())
    stats = train(
        model,
        _data(),
        recipe,
        device=CPU,
        dtype="fp32",
        pad_id=PAD,
        ddp_rank=rank,
        ddp_world=world,
        reduce_sum=reduce_sum,
    )
    lora = [p.detach().sum().item() for n, p in model.module.named_parameters() if p.requires_grad]
    (out / f"rank{rank}.json").write_text(json.dumps({"losses": stats.train_loss, "params": lora}))
    # Exit without tearing gloo down: freeing DDP's reducer destroys the process group with the GIL held while a
    # gloo worker thread may need the GIL to free a finished all-reduce's tensors, a deadlock that hung this test
    # once in CI (pytorch/pytorch#56297). The results are written; an exception above still fails the rank.
    os._exit(0)


def test_packed_steps_under_data_parallelism_match_one_process(tmp_path):
    """Two gloo ranks, each packing its share of every step's rows, train like one process (same losses and
    the same parameters on both ranks)."""
    import json
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_packed_rank, args=(2, port, tmp_path), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    single = _run(_recipe(tokens_per_step=1024, pack_length=256, pack=True, micro_batch_tokens=256))[0]
    tol = 2 * 2 * fp32_loss_rtol(SAMPLES_PER_STEP, STEPS)  # as _assert_same
    for rank in ranks:
        assert max(abs(a - b) for (_, a), b in zip(rank["losses"], single)) < tol
    assert ranks[0]["params"] == pytest.approx(ranks[1]["params"], rel=tol)  # the same all-reduced steps


def test_an_image_without_a_compiler_trains_eager_and_says_why(monkeypatch):
    """Source-built ROCm cells carry ENVBUILD_TORCH_COMPILE_UNAVAILABLE (no pytorch-triton-rocm): a compiling
    preset then never tries, runs the same steps eager, and records the image's reason."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from workload.training.speed import COMPILE_UNAVAILABLE_ENV

    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setenv(COMPILE_UNAVAILABLE_ENV, "no pytorch-triton-rocm in this image")
    budget = dict(tokens_per_step=1024, pack_length=256, pack=True)
    skipped = _run(_recipe(**budget, compile=True), compile_backend="aot_eager")
    assert not counters["stats"]["unique_graphs"]  # nothing was compiled
    assert skipped[2].compiled_layers == 0 and skipped[2].warmup_seconds == 0
    assert skipped[2].compile_error == "unavailable in this image: no pytorch-triton-rocm in this image"
    _assert_same(_run(_recipe(**budget)), skipped)
