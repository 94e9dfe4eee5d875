"""`python -m workload train|probe|predict` (also what `envbuild run workload` calls)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import sys
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path

from . import launch
from .errors import RECEIVED_SIGNALS
from .training.presets import PRESETS, preset_for


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors in the workload's bad-input form (`envbuild run` quotes that line)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(2, f"[workload] bad input: {self.prog}: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m workload", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    # No abbreviations: a data-parallel run hands these arguments on through torchrun's own parser.
    t = sub.add_parser(
        "train", help="LoRA fine-tune a Gemma classifier and write result.json + adapter", allow_abbrev=False
    )
    t.add_argument("--preset", choices=sorted(PRESETS), default="smoke")
    t.add_argument(
        "--out", type=Path, help="directory for result.json and adapter/ [default: ./workload-runs/<UTC time>-<id>]"
    )
    t.add_argument("--model", help="hub id, local path, or tiny-gemma / tiny-gemma2 / tiny-gemma3 / tiny-gemma4")
    t.add_argument("--revision", help="model revision (branch, tag or commit) for hub ids")
    t.add_argument("--data", help="JSONL or CSV with text and label columns (default: the bundled sample)")
    t.add_argument("--text-column", default="text")
    t.add_argument("--label-column", default="label")
    t.add_argument("--labels", help="comma-separated label names, or 'auto' to take them from the data")
    t.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N (ROCm GPUs are cuda too)")
    t.add_argument(
        "--nproc",
        type=_nproc,
        default="auto",
        help="data-parallel processes: auto = one per visible GPU (1 on the CPU); N > 1 on the CPU "
        "starts N gloo processes. A plain start re-launches itself under torchrun",
    )
    t.add_argument(
        "--dist-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="how long a data-parallel rank waits for the others in a collective before the run fails [default: 300]",
    )
    t.add_argument("--dtype", choices=["auto", "fp32", "bf16", "fp16"])
    t.add_argument(
        "--attn",
        dest="attn_implementation",
        help="attention implementation: auto, sdpa, eager, flash_attention_2, flash_attention_3, flex_attention",
    )
    t.add_argument("--seed", type=int)
    t.add_argument("--epochs", type=int)
    t.add_argument(
        "--max-steps",
        type=int,
        help="stop after N optimizer steps (N >= 1; the schedule repeats "
        "epochs if needed) [default: no limit, --epochs decide]",
    )
    t.add_argument(
        "--untimed-steps",
        type=int,
        help="optimizer steps run before the timing starts (the speed "
        "preset: 10); samples/s, tokens/s and MFU count the rest",
    )
    t.add_argument("--batch-size", type=int)
    t.add_argument("--lr", dest="learning_rate", type=float)
    t.add_argument("--max-length", type=int)
    t.add_argument("--warmup-steps", type=int)
    t.add_argument("--lora-r", type=int)
    t.add_argument("--lora-dropout", type=float)
    t.add_argument("--pad-multiple", type=int)
    t.add_argument("--gradient-checkpointing", action="store_true", default=None)
    t.add_argument(
        "--min-accuracy",
        type=float,
        help="fail with did_not_learn below this eval accuracy (0 to 1) [default: the pass bar from "
        "the eval split: its majority-class rate plus a margin, docs/matrix.md]",
    )
    t.add_argument("--no-probes", action="store_true", help="skip the environment probes")
    t.add_argument("--quiet", action="store_true")

    r = sub.add_parser(
        "probe", help="run the environment probes: a table (or --json) on stdout, and result.json with --out"
    )
    r.add_argument("--out", type=Path, help="also write DIR/result.json")
    r.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    r.add_argument("--device", default="auto")
    r.add_argument("--dtype", default="auto", choices=["auto", "fp32", "bf16", "fp16"])

    d = sub.add_parser("predict", help="classify texts with a saved adapter (JSON lines on stdout)")
    d.add_argument("--adapter", type=Path, required=True, help="the adapter/ directory a train run wrote")
    d.add_argument("texts", nargs="*", help="texts to classify (default: one per line on stdin)")
    d.add_argument("--device", default="auto")
    d.add_argument("--dtype", default="auto", choices=["auto", "fp32", "bf16", "fp16"])
    return p


def _seconds(text: str) -> float:
    """argparse type for --dist-timeout: a number of seconds above 0 (and finite)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0, e.g. 300")
    return value


def _nproc(text: str):
    try:
        return launch.parse_nproc(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _recipe(args):
    recipe = preset_for(args.preset, args.model).replace(
        model=args.model,
        dtype=args.dtype,
        attn_implementation=args.attn_implementation,
        seed=args.seed,
        epochs=args.epochs,
        max_steps=args.max_steps,
        untimed_steps=args.untimed_steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        max_length=args.max_length,
        warmup_steps=args.warmup_steps,
        lora_r=args.lora_r,
        lora_dropout=args.lora_dropout,
        pad_multiple=args.pad_multiple,
        gradient_checkpointing=args.gradient_checkpointing,
        min_accuracy=args.min_accuracy,
    )
    if args.labels == "auto":
        return dataclasses.replace(recipe, labels=None)
    if args.labels:
        return recipe.replace(labels=tuple(x.strip() for x in args.labels.split(",") if x.strip()))
    return recipe


def _writable_out(out: Path, created: list[Path]) -> Path:
    """Create `out` (the dirs made are added to `created`) and prove it is writable before any work;
    PathError (exit code 2) otherwise."""
    from .errors import PathError

    created.extend(reversed([p for p in (out, *out.parents) if not p.exists()]))
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".workload-write-test-"):
            pass
    except OSError as exc:
        raise PathError(
            f"--out {out}: cannot write there ({exc.strerror or exc}); pass a directory you can write"
        ) from None
    return out


def _default_run_dir() -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("workload-runs") / f"{stamp}-{uuid.uuid4().hex[:6]}"


def _in_finalizer(frame) -> bool:
    """True while a __del__ runs: an exception raised there is printed and dropped, never seen by the run."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def _signals_as_interrupt():
    """SIGTERM (docker stop, torchrun tearing down ranks) and SIGINT end the run like Ctrl-C: result
    `interrupted`. A signal that arrives inside a finalizer is raised again 50 ms later (SIGALRM), else it
    would be lost and the run would carry on."""

    def handler(signum, frame):
        RECEIVED_SIGNALS.append(signum)
        if _in_finalizer(frame):
            signal.signal(signal.SIGALRM, lambda _s, f: handler(signum, f))
            signal.setitimer(signal.ITIMER_REAL, 0.05)
            return
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    noted_before = len(RECEIVED_SIGNALS)
    try:
        yield
    except Exception as exc:
        if len(RECEIVED_SIGNALS) > noted_before:  # a library turned the interrupt into its own error (numpy's
            # C-extension import, interrupted while torch imports, raises ImportError): still an interrupt
            raise KeyboardInterrupt(
                f"signal {RECEIVED_SIGNALS[noted_before]}, surfaced as {type(exc).__name__}"
            ) from exc
        raise
    finally:
        del RECEIVED_SIGNALS[noted_before:]  # this run's signals end with it (a later run in this process starts clean)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, old in previous.items():
            signal.signal(s, old)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    from .errors import InputError

    created: list[Path] = []
    try:
        with _signals_as_interrupt():
            return _dispatch(args, argv, created)
    except InputError as exc:
        for path in reversed(created):  # bad input leaves nothing behind, not even an empty --out
            with contextlib.suppress(OSError):
                path.rmdir()
        print(f"[workload] bad input: {exc}", file=sys.stderr, flush=True)
        return 2


def _launch_size(args) -> int:
    """Ranks to start from this plain process (1: train here); a usage error exits with code 2."""
    if launch.under_launcher():
        return 1
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    try:
        return launch.resolve_nproc(args.nproc, args.device, gpus)
    except launch.LaunchRequestError as exc:
        _parser().error(str(exc))


def _dispatch(args, argv: list[str], created: list[Path]) -> int:
    if args.command == "train":
        from .settings import check_device, check_recipe

        recipe = check_recipe(_recipe(args))  # settings out of range: exit 2 before anything is written (or imported)
        check_device(args.device)
        from .runner import launch_train_command, train_command

        if args.out is None and not launch.under_launcher():
            args.out = _default_run_dir()
            argv = [*argv, "--out", str(args.out)]  # ranks started by torchrun write to the same dir
            print(f"[workload] no --out given: writing to {args.out}", file=sys.stderr, flush=True)
        if args.out is not None:
            _writable_out(args.out, created)
        nproc = _launch_size(args)
        if nproc > 1:
            code, _ = launch_train_command(
                recipe,
                argv,
                nproc,
                out_dir=args.out,
                device_name=args.device,
                dataset_path=args.data,
                text_column=args.text_column,
                label_column=args.label_column,
                revision=args.revision,
            )
            return code
        code, _ = train_command(
            recipe,
            out_dir=args.out,
            dataset_path=args.data,
            device_name=args.device,
            revision=args.revision,
            probes=not args.no_probes,
            text_column=args.text_column,
            label_column=args.label_column,
            quiet=args.quiet,
            argv=argv,
            dist_timeout_s=args.dist_timeout,
        )
        return code
    if args.command == "probe":
        from .probes.probe_table import probe_table
        from .runner import probe_command

        from .settings import check_device

        check_device(args.device)
        if args.out is not None:
            _writable_out(args.out, created)
        code, result = probe_command(args.out, args.device, args.dtype)
        if args.json:
            print(
                json.dumps(
                    {k: v for k, v in result.items() if not k.startswith("_")},
                    indent=2,
                    ensure_ascii=False,
                    default=str,
                )
            )
        else:
            sys.stdout.write(probe_table(result.get("probes") or []))
            print(
                f"{result['status']}"
                + (f" ({result['error_class']}: {result['error']})" if result["status"] != "pass" else "")
            )
        return code
    from .model.classifier import read_adapter_meta
    from .model.predict import predict
    from .settings import check_device

    check_device(args.device)

    read_adapter_meta(args.adapter)  # a bad --adapter is one clear line before anything loads
    texts = args.texts or [line.strip() for line in sys.stdin if line.strip()]
    for row in predict(args.adapter, texts, device_name=args.device, dtype=args.dtype):
        print(json.dumps(row, ensure_ascii=False))
    return 0
