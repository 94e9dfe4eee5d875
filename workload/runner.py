"""The `train` and `probe` commands: run, classify any failure, and always write a result."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from . import launch
from .errors import RECEIVED_SIGNALS, DidNotLearn, DidNotTrain, InputError, ProbeFailure, WorkloadError
from .probes import environment as env
from .result import finish, new_result, write_result
from .training.noise import third_party_to
from .training.presets import Recipe, preset_for

if TYPE_CHECKING:
    from .training.distributed import Dist

EXIT_BAD_INPUT = 2
#: Seconds between two progress lines of a long tokenization.
PROGRESS_EVERY_S = 2.0


@dataclasses.dataclass(frozen=True)
class TrainRun:
    """What a fine-tune runs with once its device is known: the recipe, the device and dtype, this process's place
    among the ranks (`dist`), whether the probes run and whether progress lines are left out."""

    recipe: Recipe
    device: torch.device
    dtype: str
    dist: Dist
    probes: bool = True
    quiet: bool = False


def _log(message: str) -> None:
    print(f"[workload] {message}", file=sys.stderr, flush=True)


def bad_input(exc: InputError) -> int:
    """Report an input error (nothing is written: it says nothing about the environment); exit code 2."""
    _log(f"bad input: {exc}")
    return EXIT_BAD_INPUT


_PEER_LOST = (
    "timed out",
    "timeout",
    "connection closed",
    "connection reset",
    "broken pipe",
    "connection refused",
    "socket closed",
)


def _classify(exc: BaseException, distributed: bool = False) -> tuple[str, str, str]:
    """(status, error_class, one-line message) for any exception."""
    if isinstance(exc, WorkloadError):
        return exc.status, exc.error_class, str(exc)
    first = str(exc).splitlines()[0] if str(exc) else ""
    if distributed and not isinstance(exc, KeyboardInterrupt) and any(s in str(exc).lower() for s in _PEER_LOST):
        return "error", "distributed_timeout", f"a collective failed (a rank died or hung): {first}"
    if isinstance(exc, KeyboardInterrupt):
        return "error", "interrupted", f"interrupted ({exc or 'KeyboardInterrupt/SIGINT'})"
    if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return "error", "oom", f"out of memory: {str(exc).splitlines()[0] if str(exc) else exc!r}"
    return "error", "exception", f"{type(exc).__name__}: {first}"


def run_probes(device: torch.device, tokenizer=None, dtype=None) -> list[dict] | None:
    """The probes package's results, or None when it is not installed (this workload runs without it)."""
    try:
        from .probes import run_probes as probes_entry
    except ImportError as e:
        if getattr(e, "name", "") and not e.name.endswith("probes"):
            raise
        _log("probes package not present: skipping probes")
        return None
    return probes_entry(device, tokenizer=tokenizer, dtype=dtype)


def _probe_failure(probes: list[dict] | None) -> str | None:
    failed = [p.get("name", "?") for p in probes or [] if p.get("status") == "fail"]
    return f"probe(s) failed: {', '.join(failed)}" if failed else None


def _finalise(result: dict, out_dir: Path | None, exc: BaseException | None, distributed: bool = False) -> int:
    if RECEIVED_SIGNALS and not isinstance(exc, KeyboardInterrupt):  # a library swallowed the interrupt
        ended = type(exc).__name__ if exc is not None else "its end"
        exc = KeyboardInterrupt(f"signal {RECEIVED_SIGNALS[0]}, swallowed by a library; the run went on to {ended}")
    if exc is None:
        finish(result, "pass")
    else:
        status, error_class, message = _classify(exc, distributed)
        finish(result, status, error_class, message)
        if not isinstance(exc, (WorkloadError, KeyboardInterrupt)):
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    if out_dir is not None:
        path = write_result(out_dir, result)
        _log(f"{result['status']}{' (' + result['error_class'] + ')' if result['error_class'] else ''}: {path}")
    if result["status"] != "pass":
        _log(f"{result['status']}: {result['error_class']}: {result['error']}")
    return 0 if result["status"] == "pass" else 1


def _write_placeholder(result: dict, out_dir: Path | None) -> None:
    """Write the not-finished envelope first: a run killed outright (SIGKILL, OOM killer) leaves
    status "error"/"interrupted" behind, never a stale or missing result."""
    if out_dir is not None:
        write_result(out_dir, result)


def probe_command(out_dir: Path | None, device_name: str = "auto", dtype: str = "auto") -> tuple[int, dict]:
    result = new_result("probe")
    exc = None
    _write_placeholder(result, out_dir)
    try:
        result["versions"] = env.versions()
        device = env.pick_device(device_name)
        result["hardware"] = env.hardware(device)
        probes = run_probes(device, dtype=env.TORCH_DTYPES[env.resolve_dtype(dtype, device)])
        if probes is None:
            raise WorkloadError("the probes package (workload.probes) is not installed in this environment")
        result["probes"] = probes
        failure = _probe_failure(probes)
        if failure:
            raise ProbeFailure(failure)
    except BaseException as e:  # noqa: BLE001 - every failure is recorded, then re-raised only for interrupts
        exc = e
    return _finalise(result, out_dir, exc), result


def train_command(
    recipe: Recipe,
    *,
    out_dir: Path | None,
    dataset_path: str | None = None,
    device_name: str = "auto",
    revision: str | None = None,
    probes: bool = True,
    text_column: str = "text",
    label_column: str = "label",
    quiet: bool = False,
    argv: list[str] | None = None,
    dist_timeout_s: float | None = None,
) -> tuple[int, dict]:
    """Run one fine-tune; returns (exit code, result). The result is written to out_dir/result.json.
    Bad input (settings, data, model path) raises InputError before anything is written. `argv`: the
    command line that started it (recorded in `invocation`); `dist_timeout_s`: how long a rank of a data-parallel
    run waits for the others (None: distributed.DEFAULT_TIMEOUT_S)."""
    from .model.shapes import is_shape
    from .training import distributed

    speed = recipe.preset == "speed"  # a random-weight shape on synthetic data: no data file, nothing downloaded
    if speed != is_shape(recipe.model):
        from .model.shapes import SHAPES
        from .settings import SettingError

        raise SettingError(
            f"--model {recipe.model}: "
            + (
                f"the speed preset trains a random-weight shape: one of {', '.join(SHAPES)}"
                if speed
                else "a random-weight shape trains with --preset speed only (its synthetic data)"
            )
        )
    if speed:
        from .settings import check_recipe

        check_recipe(recipe)
        data = None
    else:
        data = _checked_inputs(recipe, dataset_path, text_column, label_column)
    result = new_result("train")
    result["invocation"] = dict(invocation(recipe, data, argv, revision), probes=probes)
    exc = None
    scratch = Path(tempfile.mkdtemp(prefix="workload-"))
    dist = distributed.Dist()
    noise = Path(out_dir) / third_party_log_name() if out_dir is not None else None
    try:
        dist = distributed.init_from_env(device_name, dist_timeout_s)
        if dist.is_main:
            _write_placeholder(result, out_dir)
        result["versions"] = env.versions()
        device = dist.device if dist.active else env.pick_device(device_name)
        if dist.active:
            _log(f"rank {dist.rank}/{dist.world_size} on {device}")
        result["hardware"] = env.hardware(device)
        _check_visible_devices(device)
        dtype = env.resolve_dtype(recipe.dtype, device)
        result["config"] = _config_block(recipe, dtype, dist.world_size)
        with third_party_to(noise):
            run = TrainRun(recipe, device, dtype, dist, probes=probes, quiet=quiet)
            if speed:
                _train_speed(result, run)
            else:
                _train(result, run, data, revision, out_dir, scratch)
    except BaseException as e:  # noqa: BLE001 - recorded in the result
        exc = e
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        dist.shutdown()
    if not dist.is_main:  # rank 0 alone writes the result
        if exc is not None:
            _log(f"rank {dist.rank}: {_classify(exc, True)[2]}")
        return (0 if exc is None else 1), result
    return _finalise(result, out_dir, exc, dist.active), result


def launch_train_command(
    recipe: Recipe,
    train_argv: list[str],
    nproc: int,
    *,
    out_dir: Path | None,
    device_name: str = "auto",
    dataset_path: str | None = None,
    text_column: str = "text",
    label_column: str = "label",
    revision: str | None = None,
) -> tuple[int, dict]:
    """Data parallelism from a plain start: re-run `train_argv` under torchrun with `nproc` ranks
    (workload/launch.py); (exit code, the final result: rank 0's, corrected if a rank failed)."""
    data = _checked_inputs(recipe, dataset_path, text_column, label_column)  # bad input: InputError, nothing written
    result = new_result("train")
    result["invocation"] = invocation(recipe, data, train_argv, revision)
    try:
        result["versions"] = env.versions()
        device = env.pick_device(device_name)
        result["hardware"] = env.hardware(device)
        result["config"] = _config_block(recipe, recipe.dtype, nproc)
        _check_visible_devices(device)
        _write_placeholder(result, out_dir)  # stays only if rank 0 never writes (then: process_died)
        command = launch.torchrun_command(train_argv, nproc)
        _log(f"launching {nproc} processes: {' '.join(command[1:])}")
        code, signum, cause = launch.run_supervised(command)
    except BaseException as e:  # noqa: BLE001 - recorded in the result
        return _finalise(result, out_dir, e), result
    code, final = launch.reconcile(out_dir, result, code, signum, cause)
    return code, final or result


def _checked_inputs(recipe: Recipe, dataset_path, text_column: str, label_column: str):
    """The dataset, loaded and validated, after the settings and the model source are checked (InputError if
    any is bad)."""
    from .data.dataset import CHARS_PER_TOKEN_LIMIT, load_dataset
    from .model.classifier import check_model_source
    from .settings import check_recipe

    check_recipe(recipe)
    check_model_source(recipe.model)
    data = load_dataset(
        dataset_path,
        labels=recipe.labels,
        eval_fraction=recipe.eval_fraction,
        seed=recipe.seed,
        text_col=text_column,
        label_col=label_column,
        max_chars=recipe.max_length * CHARS_PER_TOKEN_LIMIT,
    )
    if data.truncated and os.environ.get("RANK", "0") == "0":
        _log(
            f"{data.truncated} text(s) longer than {recipe.max_length * CHARS_PER_TOKEN_LIMIT} characters "
            f"were cut to that length when read ({CHARS_PER_TOKEN_LIMIT} per token of max_length)"
        )
    return data


def third_party_log_name() -> str:
    """third-party.log on rank 0 (and single-process runs), third-party.rankN.log on the others."""
    from .training.noise import LOG_NAME

    rank = os.environ.get("RANK", "0")
    return LOG_NAME if rank == "0" else LOG_NAME.replace(".log", f".rank{rank}.log")


def invocation(recipe: Recipe, data, argv: list[str] | None, revision: str | None) -> dict:
    """What made this run: the command line, preset, model, data file (name and sha256) and every setting that
    differs from the preset's (`overrides`; empty: the preset as it stands)."""
    from .data.dataset import DEFAULT_DATASET

    preset = preset_for(recipe.preset, recipe.model)
    overrides = {
        f.name: _tuple_as_list(getattr(recipe, f.name))
        for f in dataclasses.fields(recipe)
        if f.name not in ("preset", "model") and getattr(recipe, f.name) != getattr(preset, f.name)
    }
    if data is None:  # the speed preset's synthetic data (its sha256 is filled in once it is made)
        block = {"name": SYNTHETIC_DATA, "bundled": False, "sha256": None}
    else:
        bundled = Path(data.path).resolve() == DEFAULT_DATASET.resolve()
        block = {
            "name": DEFAULT_DATASET.name if bundled else Path(data.path).name,
            "bundled": bundled,
            "sha256": data.sha256,
        }
    return {
        "argv": ["python", "-m", "workload", *argv] if argv is not None else None,
        "preset": recipe.preset,
        "model": recipe.model,
        "revision": revision,
        "data": block,
        "overrides": overrides,
    }


#: The data name a speed run records (workload/data/synthetic.py); the matrix labels such runs without "data=".
SYNTHETIC_DATA = "synthetic"


def _tuple_as_list(value):
    return list(value) if isinstance(value, tuple) else value


def _tokenise(tokenizer, texts: list[str], max_length: int, what: str, quiet: bool) -> tuple[list[list[int]], int]:
    """Token ids of `texts`, with a progress line every PROGRESS_EVERY_S seconds when that takes long."""
    import time

    from .training.batching import encode_counted

    started = last = time.monotonic()

    def progress(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if not quiet and now - last >= PROGRESS_EVERY_S:
            _log(f"tokenizing the {what} texts: {done}/{total} ({now - started:.0f} s)")
            last = now

    return encode_counted(tokenizer, texts, max_length, progress)


def _check_visible_devices(device: torch.device) -> None:
    if device.type != "cuda":
        return
    problem = launch.visible_devices_problem(os.environ, bool(torch.version.hip), torch.cuda.device_count())
    if problem:
        raise launch.VisibleDevicesMismatch(problem)


def merge_rank_probes(per_rank: list[list[dict]]) -> list[dict]:
    """Rank 0's probe records, each marked `fail` where any other rank's record of that probe failed
    (multi-GPU health: one bad GPU fails the run), with `values.failed_ranks` and the ranks' messages."""
    merged = [dict(record, values=dict(record.get("values") or {})) for record in per_rank[0]]
    for record in merged:
        failed = [
            (rank, other)
            for rank, records in enumerate(per_rank)
            for other in records
            if other.get("name") == record["name"] and other.get("status") == "fail"
        ]
        if failed and any(rank > 0 for rank, _ in failed):
            record["status"] = "fail"
            record["values"]["failed_ranks"] = [rank for rank, _ in failed]
            record["message"] = "; ".join(f"rank {rank}: {other.get('message', '')}" for rank, other in failed)
    return merged


def _config_block(recipe: Recipe, dtype: str, world_size: int) -> dict:
    return {
        "preset": recipe.preset,
        "seed": recipe.seed,
        "dtype": dtype,
        "attn_implementation": recipe.attn_implementation,
        "lora": recipe.lora_dict(),
        "learning_rate": recipe.learning_rate,
        "batch_size": recipe.batch_size,
        "epochs": recipe.epochs,
        "max_steps": recipe.max_steps,
        "max_length": recipe.max_length,
        "warmup_steps": recipe.warmup_steps,
        "weight_decay": recipe.weight_decay,
        "gradient_checkpointing": recipe.gradient_checkpointing,
        "pad_multiple": recipe.pad_multiple,
        "world_size": world_size,
        "min_accuracy": recipe.min_accuracy,
        "speed": {
            "tokens_per_step": recipe.tokens_per_step,
            "micro_batch_tokens": recipe.micro_batch_tokens,
            "bucket_lengths": list(recipe.bucket_lengths) if recipe.bucket_lengths else None,
            "pack": recipe.pack,
            "pack_length": recipe.pack_length,
            "pack_samples": list(recipe.pack_samples) if recipe.pack_samples else None,
            "lr_scaling": recipe.lr_scaling,
            "compile": recipe.compile,
            "graph_steps": recipe.graph_steps,
            "varlen_attention": recipe.varlen_attention,
            "merged_qkv": recipe.merged_qkv,
        },
    }


def _train(result: dict, run: TrainRun, data, revision: str | None, out_dir: Path | None, scratch: Path) -> None:
    recipe, device, dtype, dist, quiet = run.recipe, run.device, run.dtype, run.dist, run.quiet
    from .training.pass_bar import pass_bar
    from .model.classifier import (
        LastTokenClassifier,
        apply_lora,
        count_parameters,
        load_base,
        make_trainable_fp32,
        save_adapter,
    )
    from .training.loop import Tokenised, evaluate, train

    torch.manual_seed(recipe.seed)
    result["dataset"] = data.summary()
    loaded = load_base(
        recipe.model,
        len(data.labels),
        torch_dtype=env.TORCH_DTYPES[dtype],
        attn=recipe.attn_implementation,
        revision=revision,
        seed=recipe.seed,
        work_dir=scratch / "base",
        tokenizer_texts=[e.text for e in data.train],
    )
    base = loaded.model
    result["config"]["attn_implementation"] = getattr(base.config, "_attn_implementation", None)
    if run.probes:
        probes = run_probes(device, tokenizer=loaded.tokenizer, dtype=env.TORCH_DTYPES[dtype])
        result["probes"] = merge_rank_probes(dist.all_gather_object(probes or []))
    if recipe.gradient_checkpointing:
        hf = base.model if isinstance(base, LastTokenClassifier) else base
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    loaded.model = apply_lora(
        base, recipe.lora_r, recipe.lora_alpha, recipe.lora_dropout, recipe.target_modules, recipe.train_embeddings
    )
    make_trainable_fp32(loaded.model)
    model = loaded.model.to(device)
    n_all, n_trainable, n_non_embedding = count_parameters(model)
    result["model"] = {
        "id": recipe.model,
        "revision": revision,
        "family": loaded.family,
        "num_parameters": n_all,
        "trainable_parameters": n_trainable,
        "non_embedding_parameters": n_non_embedding,
    }
    label_ids = {name: i for i, name in enumerate(data.labels)}
    train_ids, cut_train = _tokenise(
        loaded.tokenizer, [e.text for e in data.train], recipe.max_length, "training", quiet or not dist.is_main
    )
    eval_ids, cut_eval = _tokenise(
        loaded.tokenizer, [e.text for e in data.eval], recipe.max_length, "evaluation", quiet or not dist.is_main
    )
    result["dataset"]["truncated_tokens"] = cut_train + cut_eval
    if cut_train + cut_eval and dist.is_main:
        _log(f"{cut_train + cut_eval} text(s) longer than max_length {recipe.max_length} tokens were truncated")
    tok = Tokenised(
        train_ids, [label_ids[e.label] for e in data.train], eval_ids, [label_ids[e.label] for e in data.eval]
    )
    pad_id = loaded.tokenizer.pad_token_id
    eval_kwargs = dict(device=device, dtype=dtype, pad_id=pad_id, recipe=recipe, num_labels=len(data.labels))
    bar = pass_bar(tok.eval_labels, len(data.labels), floor=recipe.accuracy_floor, given=recipe.min_accuracy)
    result["config"].update(min_accuracy=bar["min_accuracy"], pass_bar=bar)
    metrics = {"eval_before": evaluate(model, tok.eval_ids, tok.eval_labels, **eval_kwargs)}
    result["metrics"] = metrics
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    train_model = dist.wrap(model)

    stats = train(
        train_model,
        tok,
        recipe,
        device=device,
        dtype=dtype,
        pad_id=pad_id,
        on_step=Progress(quiet or not dist.is_main),
        ddp_rank=dist.rank,
        ddp_world=dist.world_size,
        reduce_sum=dist.all_reduce_sum,
    )
    _record_training(result, recipe, stats, n_non_embedding, dist.world_size, device)
    if stats.steps == 0:
        raise DidNotTrain("no optimizer step ran, so nothing was trained: the run says nothing about learning")
    metrics["eval_after"] = evaluate(model, tok.eval_ids, tok.eval_labels, **eval_kwargs)
    if out_dir is not None and dist.is_main:
        save_adapter(
            loaded,
            Path(out_dir) / "adapter",
            data.labels,
            {"max_length": recipe.max_length, "dataset_sha256": data.sha256},
        )
        result["artifacts"] = {"adapter_dir": "adapter"}
    _check_learned(result, bar)


def _check_learned(result: dict, bar: dict) -> None:
    metrics = result["metrics"]
    after = metrics["eval_after"]["accuracy"]
    if after < bar["min_accuracy"]:
        raise DidNotLearn(
            f"eval accuracy after training {after:.3f} is below the pass bar {bar['min_accuracy']:.3f} "
            f"({bar['source']}; majority-class rate {bar['majority_rate']:.3f}, chance "
            f"{bar['chance']:.3f}, before training {metrics['eval_before']['accuracy']:.3f})"
        )
    failure = _probe_failure(result.get("probes"))
    if failure:
        raise ProbeFailure(failure)


#: A run whose estimated time left exceeds this says so at its second progress line (`--max-steps 10000000`).
LONG_RUN_S = 3 * 3600


class Progress:
    """The loop's progress callback: `step N/M loss L, ETA ...`; once the pace is known (the second report), a run
    estimated to need more than LONG_RUN_S says so: how long, and how to shorten it."""

    def __init__(self, quiet: bool, clock=None):
        import time

        self.quiet, self.clock, self.started, self.first, self.warned = quiet, clock or time.monotonic, None, 0, False

    def __call__(self, step: int, total: int, loss: float) -> None:
        now = self.clock()
        if self.started is None:  # the first report: the pace is measured from here (warm-up is behind us)
            self.started, self.first = now, step
            if not self.quiet:
                _log(f"step {step}/{total} loss {loss:.4f}")
            return
        per_step = (now - self.started) / max(1, step - self.first)
        left = per_step * (total - step)
        if not self.quiet:
            _log(f"step {step}/{total} loss {loss:.4f}, ETA {duration(left)}")
        if not self.warned and left > LONG_RUN_S:
            self.warned = True
            _log(
                f"note: this run will take about {duration(left)} more ({total - step:,} optimizer steps at "
                f"{per_step:.2f} s each); --max-steps N shortens it"
            )


def duration(seconds: float) -> str:
    """ "3d 4h", "2h 05m", "4m 09s"."""
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}d {hours}h" if days else f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def _record_training(result: dict, recipe: Recipe, stats, n_non_embedding: int, world: int, device) -> None:
    """What the loop measured, into the result: the schedule and levers as they ran, speed and memory."""
    from .training.metrics import flops_per_token, mfu, mfu_from_flops

    metrics = result["metrics"]
    peak = result["hardware"]["peak_tflops"]
    # what the loop really used: the scaled learning rate and warmup, packing and compilation as they ran
    result["config"].update(
        base_learning_rate=recipe.learning_rate, learning_rate=stats.learning_rate, warmup_steps=stats.warmup_steps
    )
    result["config"]["speed"].update(
        packed=stats.packed,
        compiled_layers=stats.compiled_layers,
        compile_error=stats.compile_error,
        graphed_layouts=stats.graphed_layouts,
        graph_error=stats.graph_error,
        varlen_attention=stats.varlen_attention,
        varlen_error=stats.varlen_error,
        merged_qkv_blocks=stats.merged_qkv_blocks,
    )
    metrics.update(
        {
            "curves": {"train_loss": stats.train_loss, "grad_norm": stats.grad_norm},
            "steps": stats.steps,
            "untimed_steps": stats.untimed_steps,
            "train_seconds": round(stats.seconds, 3),
            "warmup_seconds": round(stats.warmup_seconds, 3),
            "padded_tokens": stats.padded_tokens,
            "samples_per_s": round(stats.samples_per_s, 3),
            "tokens_per_s": round(stats.tokens_per_s, 1),
            "mfu": mfu(stats.tokens_per_s, n_non_embedding, peak, world),
            "mfu_with_attention": mfu_from_flops(
                (stats.tokens * flops_per_token(n_non_embedding) + stats.attention_flops) / stats.seconds
                if stats.seconds
                else 0.0,
                peak,
                world,
            ),
            "peak_memory_allocated_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
            "peak_memory_reserved_bytes": torch.cuda.max_memory_reserved(device) if device.type == "cuda" else None,
        }
    )


def _train_speed(result: dict, run: TrainRun) -> None:
    """The `speed` preset's run (docs/workload.md "The speed preset"): a random-weight classifier of the shape
    `recipe.model` on synthetic learnable data, the throughput levers, untimed steps first, then the timed ones;
    the eval accuracy must pass the bar (the learning check), or the run fails `did_not_learn`."""
    from .data.synthetic import PAD, fingerprint, synthetic_data
    from .model.classifier import apply_lora, count_parameters, make_trainable_fp32
    from .model.shapes import build, vocab_size
    from .training.loop import Tokenised, evaluate, train
    from .training.pass_bar import pass_bar

    recipe, device, dtype, dist, quiet = run.recipe, run.device, run.dtype, run.dist, run.quiet
    labels = recipe.labels
    vocab = vocab_size(recipe.model)
    per_step = (recipe.tokens_per_step or recipe.batch_size * 68) // 68 + 1  # the samples average ~68 tokens
    steps = recipe.max_steps or 50
    train_ids, train_labels = synthetic_data(
        steps * per_step, vocab, seed=recipe.seed + 1, num_labels=len(labels), max_length=recipe.max_length
    )
    eval_ids, eval_labels = synthetic_data(
        512, vocab, seed=recipe.seed + 2, num_labels=len(labels), max_length=recipe.max_length
    )
    sha = fingerprint(train_ids + eval_ids, train_labels + eval_labels)
    result["invocation"]["data"]["sha256"] = sha
    result["dataset"] = {
        "path": SYNTHETIC_DATA,
        "sha256": sha,
        "n_train": len(train_ids),
        "n_eval": len(eval_ids),
        "labels": list(labels),
        "vocab_size": vocab,
    }
    if not quiet and dist.is_main:
        _log(f"building the random-weight {recipe.model} classifier ({dtype}) on {device}")
    base, family = build(
        recipe.model,
        len(labels),
        torch_dtype=env.TORCH_DTYPES[dtype],
        device=device,
        seed=recipe.seed,
        attn=recipe.attn_implementation,
    )
    result["config"]["attn_implementation"] = getattr(base.config, "_attn_implementation", None)
    if run.probes:
        probes = run_probes(device, dtype=env.TORCH_DTYPES[dtype])
        result["probes"] = merge_rank_probes(dist.all_gather_object(probes or []))
    model = apply_lora(
        base, recipe.lora_r, recipe.lora_alpha, recipe.lora_dropout, recipe.target_modules, recipe.train_embeddings
    )
    make_trainable_fp32(model)
    model = model.to(device)
    n_all, n_trainable, n_non_embedding = count_parameters(model)
    result["model"] = {
        "id": recipe.model,
        "revision": None,
        "family": family,
        "random_weights": True,
        "num_parameters": n_all,
        "trainable_parameters": n_trainable,
        "non_embedding_parameters": n_non_embedding,
    }
    tok = Tokenised(train_ids, train_labels, eval_ids, eval_labels)
    eval_kwargs = dict(device=device, dtype=dtype, pad_id=PAD, recipe=recipe, num_labels=len(labels))
    bar = pass_bar(eval_labels, len(labels), floor=recipe.accuracy_floor, given=recipe.min_accuracy)
    result["config"].update(min_accuracy=bar["min_accuracy"], pass_bar=bar)
    result["metrics"] = {"eval_before": evaluate(model, eval_ids, eval_labels, **eval_kwargs)}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    if not quiet and dist.is_main:
        _log(f"training {steps} steps: {min(recipe.untimed_steps, steps - 1)} untimed, then the timed ones")
    stats = train(
        dist.wrap(model),
        tok,
        recipe,
        device=device,
        dtype=dtype,
        pad_id=PAD,
        on_step=Progress(quiet or not dist.is_main),
        ddp_rank=dist.rank,
        ddp_world=dist.world_size,
        reduce_sum=dist.all_reduce_sum,
    )
    _record_training(result, recipe, stats, n_non_embedding, dist.world_size, device)
    if stats.steps == 0:
        raise DidNotTrain("no optimizer step ran, so nothing was trained: the run says nothing about learning")
    result["metrics"]["eval_after"] = evaluate(model, eval_ids, eval_labels, **eval_kwargs)
    _check_learned(result, bar)
