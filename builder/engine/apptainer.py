"""Apptainer: turn a built image into a SIF that proves itself, and run the workload inside a SIF.

A SIF travels with a sidecar `<name>.sif.json` (what image it came from, its manifest, the SIF's sha256 and the
verify step's outcome); runs and Slurm submissions read the sidecar, never the SIF's internals, and refuse a
SIF whose sha256 no longer matches it. Runs use `--cleanenv --containall` (no host environment, no home
directory, private /tmp) and bind only the output, data and model directories; GPU access follows the image's
flavor: `--rocm` (Apptainer binds /dev/kfd, /dev/dri and the host's ROCm driver libraries) or `--nv`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from builder.engine.container import (
    WORKLOAD_BAD_INPUT,
    BadWorkloadInput,
    RunError,
    check_data,
    flavor_of,
    input_error_line,
    resolve_model,
    workload_args,
)
from builder.engine.doctor import HostView, host_record
from builder.engine.run_output import RunLog
from builder.engine.run_result import RunEnd, check_out_dir, run_end
from builder.engine.runner import Notify, Output, Said, SifRun
from builder.interrupt import describe
from builder import strict_json
from builder.paths import CONTAINER_LOG, file_sha256, write_text_atomic
from builder.plan.steps import VERIFY_EXPECT, VERIFY_PATH

OUT_BIND, DATA_BIND, MODEL_BIND = "/out", "/data", "/model"
SIDECAR_SUFFIX = ".json"
#: What a SIF record may weigh (one `envbuild sif` writes is a few KB: the image block and its manifest).
MAX_SIDECAR_BYTES = 4 << 20
#: `apptainer` itself failed (could not start the container): its own exit code, not the workload's.
APPTAINER_FAILED = 255


class ApptainerError(RunError):
    """Apptainer is missing or refused the SIF before anything ran."""


#: The runtimes envbuild drives, in the order they are looked for on PATH: Apptainer, then SingularityCE (or an
#: older Singularity), whose `singularity` takes the same commands and options that envbuild uses.
RUNTIMES = ("apptainer", "singularity")


def apptainer_binary() -> str:
    """$ENVBUILD_APPTAINER, else `apptainer`, else `singularity` on PATH; ApptainerError when there is none."""
    found = os.environ.get("ENVBUILD_APPTAINER") or next(filter(None, map(shutil.which, RUNTIMES)), None)
    if not found:
        raise ApptainerError(
            "apptainer is not installed here (no `apptainer` or `singularity` on PATH, no "
            "$ENVBUILD_APPTAINER): install Apptainer >= 1.1 "
            "(https://apptainer.org/docs/admin/main/installation.html) or SingularityCE, or load "
            "its module (`module load apptainer`)"
        )
    return found


def runtime_record(binary: str) -> dict:
    """Which runtime `binary` is (apptainer, singularity-ce or singularity, from its `--version` line, whatever
    the file is called) and its version; what each SIF record and each run says it used."""
    proc = subprocess.run([binary, "--version"], capture_output=True, text=True, errors="replace")
    return runtime_of(proc.stdout.strip() if proc.returncode == 0 else "", binary)


def runtime_of(version_line: str, path: str | None) -> dict:
    """The runtime record of a `--version` line (name and version only where the line is one of theirs)."""
    match = re.match(r"^(apptainer|singularity-ce|singularity) version (\S+)", version_line)
    return {
        "name": match[1] if match else None,
        "version": match[2] if match else None,
        "version_line": version_line or None,
        "path": path,
    }


def sidecar_path(sif: Path) -> Path:
    return sif.with_name(sif.name + SIDECAR_SUFFIX)


def read_sidecar(sif: Path, *, check_hash: bool = True) -> dict:
    """The SIF's sidecar, checked: it names an image with a manifest, and the SIF's sha256 matches."""
    sif = Path(sif)
    if not sif.is_file():
        raise RunError(f"{sif}: no such SIF file (make one with `envbuild sif IMAGE -o {sif}`)")
    side = sidecar_path(sif)
    try:
        record = strict_json.loads(strict_json.read_regular(side, MAX_SIDECAR_BYTES))
    except FileNotFoundError:
        raise RunError(f"{side} is missing: a SIF is used with the record `envbuild sif` wrote beside it") from None
    except (OSError, ValueError) as exc:  # strict_json's errors are ValueErrors
        raise RunError(f"{side} is not a readable SIF record ({exc}); make it again with `envbuild sif`") from None
    image = record.get("image") if isinstance(record, dict) else None
    if not (
        isinstance(image, dict) and isinstance(image.get("manifest"), dict) and isinstance(record.get("sha256"), str)
    ):
        raise RunError(f"{side} is not a SIF record of `envbuild sif` (no image manifest or sha256)")
    if check_hash and file_sha256(sif) != record["sha256"]:
        raise RunError(
            f"{sif}: its sha256 differs from the one in {side.name}: the SIF changed after "
            "`envbuild sif` made it; make it again"
        )
    return record


def build_sif(image_tag: str, out: Path, notify: Callable[[str], None], *, compression: str | None = None) -> dict:
    """`docker save` the image, `apptainer build` the SIF from the archive (the command said to `notify`), record its
    sha256, then run the image's verify step inside the SIF. Returns the sidecar record (also written beside the
    SIF)."""
    from builder.engine.container import image_block
    from builder.engine.docker import docker_client
    from builder.plan.context import context_hash_of

    apptainer = apptainer_binary()
    client = docker_client()
    try:
        image = client.images.get(image_tag)
    except Exception as exc:  # noqa: BLE001 - docker's NotFound/APIError: either way the image is not usable
        raise RunError(f"image {image_tag} not found locally: build it with `envbuild image ...`") from exc
    block = image_block(image, image_tag)
    if not block.get("manifest"):
        raise RunError(
            f"image {image_tag} has no envbuild manifest label: only images built by `envbuild image` become SIFs"
        )
    out = Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".envbuild-sif-", dir=out.parent))  # beside the SIF: never a small /tmp
    os.chmod(work, out.parent.stat().st_mode & 0o7777)  # as open as the SIF's own directory (apptainer may
    # be a wrapper running as another user, who must read the archive and write the SIF there)
    timings = {}
    try:
        archive = work / "image.tar"
        started = time.monotonic()
        with open(archive, "wb") as handle:
            for chunk in image.save(named=True):
                handle.write(chunk)
        os.chmod(archive, 0o644)
        timings["docker_save_s"] = round(time.monotonic() - started, 1)
        tmp_sif = work / out.name
        notify(f"apptainer build {tmp_sif.name} docker-archive://{archive.name}")
        started = time.monotonic()
        squash = ["--mksquashfs-args", f"-comp {compression}"] if compression else []  # a COMPRESSIONS name
        run_checked(
            [apptainer, "build", "--force", *squash, str(tmp_sif), f"docker-archive://{archive}"],
            work,
            "apptainer build",
        )
        timings["apptainer_build_s"] = round(time.monotonic() - started, 1)
        started = time.monotonic()
        verify = verify_in_sif(apptainer, tmp_sif, work)
        timings["verify_s"] = round(time.monotonic() - started, 1)
        runtime = runtime_record(apptainer)
        record = {
            "schema_version": 1,
            "sif": out.name,
            "sha256": file_sha256(tmp_sif),
            "size_bytes": tmp_sif.stat().st_size,
            "route": "docker-archive",
            "context_hash": (block.get("manifest") or {}).get("context_hash") or context_hash_of(image.labels),
            "image": block,
            "runtime": runtime,
            "apptainer": runtime["version_line"],
            "verify": verify,
            "timings": timings,
        }
        os.replace(tmp_sif, out)
        write_text_atomic(sidecar_path(out), json.dumps(record, indent=2) + "\n")
        os.chmod(sidecar_path(out), 0o644)  # read by runs and Slurm tasks, like the SIF
        return record
    finally:
        shutil.rmtree(work, ignore_errors=True)


def verify_in_sif(apptainer: str, sif: Path, work: Path) -> dict:
    """The image's own verify step (its verify script against its expect.json), run inside the SIF."""
    out = work / "verify"
    out.mkdir()
    os.chmod(out, 0o777)  # written by whoever apptainer runs as
    proc = subprocess.run(
        [
            apptainer,
            "exec",
            "--cleanenv",
            "--containall",
            "--bind",
            f"{out}:{OUT_BIND}",
            str(sif),
            "python3",
            VERIFY_PATH,
            VERIFY_EXPECT,
            f"{OUT_BIND}/verify.json",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        errors="replace",
    )
    try:
        report = json.loads((out / "verify.json").read_text())
    except (OSError, json.JSONDecodeError):
        report = None
    ok = proc.returncode == 0 and isinstance(report, dict) and report.get("ok") is True
    return {
        "ok": ok,
        "exit_code": proc.returncode,
        "checks": len(report.get("checks") or []) if isinstance(report, dict) else 0,
        "output_tail": (proc.stdout + proc.stderr)[-2000:],
    }


def run_checked(argv: list[str], cwd: Path, what: str) -> None:
    """Run an apptainer (or singularity) command in `cwd`; ApptainerError naming `what` and its output's tail if
    it fails."""
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        raise ApptainerError(
            f"{what} failed (exit code {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-1500:]}"
        )


def gpu_flags(flavor: str, gpus: str | None) -> tuple[list[str], list[str]]:
    """(apptainer options, --env assignments) giving the container the accelerators of its flavor."""
    if gpus is not None and not re.fullmatch(r"all|[0-9]{1,4}(,[0-9]{1,4}){0,63}", gpus):
        raise RunError(f"--gpus {gpus[:60]!r}: use 'all' or comma-separated GPU indices such as 0,1")
    if flavor == "rocm":
        env = [f"ROCR_VISIBLE_DEVICES={gpus}"] if gpus not in (None, "all") else []
        return ["--rocm"], env
    if flavor == "cuda":
        env = [f"CUDA_VISIBLE_DEVICES={gpus}"] if gpus not in (None, "all") else []
        return ["--nv"], env
    if gpus:
        raise RunError(f"--gpus {gpus}: the SIF holds a {flavor} image; it runs without GPUs")
    return [], []


def exec_argv(
    apptainer: str,
    sif: Path,
    flavor: str,
    gpus: str | None,
    binds: list[str],
    command: list[str],
    extra_env: tuple[str, ...] = (),
) -> list[str]:
    """`apptainer exec` for the workload: clean environment, contained, explicit binds only."""
    options, env = gpu_flags(flavor, gpus)
    argv = [apptainer, "exec", "--cleanenv", "--containall", "--pwd", "/tmp", *options]
    for assignment in dict.fromkeys(["PYTHONUNBUFFERED=1", "HOME=/tmp", *env, *extra_env]):
        argv += ["--env", assignment]
    for bind in binds:
        argv += ["--bind", bind]
    return argv + [str(sif), *command]


#: Characters that Apptainer's --bind reads as syntax (`src[:dst[:opts]][,src...]`) or that end a line.
_BIND_SYNTAX = (",", ":", "\n", "\r", "\x00")


def bind_source(path: Path, option: str) -> Path:
    """`path` as an Apptainer bind source; RunError (bad input) naming `option` when it holds a comma, colon or
    newline, which Apptainer would read as another bind or other options."""
    text = str(Path(path).expanduser().absolute())
    if any(c in text for c in _BIND_SYNTAX):
        raise RunError(
            f"{option} {text[:300]!r}: a path with a comma, colon or newline cannot be bound into the "
            "container (Apptainer reads them as more binds or options); use another path"
        )
    return Path(path)


def input_binds(run: SifRun) -> tuple[Path, list[str], str | None, str | None]:
    """(checked output dir, binds, model argument, data argument) of a run; bad paths are RunErrors."""
    hub_id, model_dir = resolve_model(run.model)
    data = check_data(run.data)
    for path, option in ((run.out_dir, "--out"), (data, "--data"), (model_dir, "--model")):
        if path is not None:
            bind_source(path, option)
    out_dir = check_out_dir(run.out_dir)
    binds = [f"{out_dir}:{OUT_BIND}"]
    model_arg = data_arg = None
    if model_dir:
        binds.append(f"{model_dir}:{MODEL_BIND}:ro")
        model_arg = MODEL_BIND
    elif hub_id:
        model_arg = hub_id
    if data:
        data_arg = DATA_BIND if data.is_dir() else f"{DATA_BIND}/{data.name}"
        binds.append(f"{data}:{data_arg}:ro")
    return out_dir, binds, model_arg, data_arg


class SifRunner:
    """The route of a SIF `envbuild sif` made (its record beside it): run as made, `--cleanenv --containall`."""

    def run(self, request: SifRun, notify: Notify) -> RunEnd:
        """Run the workload in `request.sif` with Apptainer; how it ended (the workflow completes the result)."""
        host = HostView()
        sif = Path(request.sif).resolve()
        record = read_sidecar(sif)
        image = dict(
            record["image"],
            environment="apptainer",
            sif={"path": str(sif), "sha256": record["sha256"], "route": record.get("route")},
        )
        manifest = image["manifest"]
        check_sif_network(request.network)
        flavor = flavor_of(manifest)
        gpu_flags(flavor, request.gpus)  # a --gpus the flavor cannot use is bad input, before anything runs
        out_dir, binds, model_arg, data_arg = input_binds(request)
        cell = manifest.get("cell") or {}
        started = time.time()
        failure_class, failure = None, ""
        try:
            apptainer = apptainer_binary()
        except ApptainerError as exc:  # the environment was never reached: an attempt, never a verdict
            failure_class, failure = "container_error", str(exc)
            (out_dir / CONTAINER_LOG).write_text(f"# envbuild: {exc}\n", encoding="utf-8")
            notify(Said(str(exc), "error"))
        else:
            image["runtime"] = runtime_record(apptainer)  # which runtime (Apptainer or SingularityCE) ran it
            argv = exec_argv(
                apptainer,
                sif,
                flavor,
                request.gpus,
                binds,
                ["python3", "-m", "workload", *workload_args(request, model_arg, data_arg, OUT_BIND)],
            )
            notify(Said(f"running {sif.name} ({flavor}) with apptainer: {' '.join(argv[1:])}; output -> {out_dir}"))
            failure_class, failure = stream_apptainer(argv, out_dir, notify)
        return run_end(
            out_dir,
            failure_class,
            failure,
            started,
            versions={k: cell.get(k) for k in ("python", "torch")},
            host=host_record(host, site_recipes=request.site_recipes),
            image=image,
        )


def stream_apptainer(
    argv: list[str], out_dir: Path, notify: Notify, env: dict[str, str] | None = None
) -> tuple[str | None, str]:
    """Run `argv` (with `env`, default this environment), its output (scrubbed of known secrets, at most
    MAX_RUN_OUTPUT bytes) to container.log and to `notify` (Output); (failure class, failure), None when it exited 0. The workload
    refusing its input raises BadWorkloadInput."""
    failure_class, failure = None, ""
    with RunLog(out_dir / CONTAINER_LOG) as log:  # before apptainer starts: it never chooses where this goes
        log.watch_lines(lambda line: input_error_line(line) is not None)
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=out_dir, env=env
        )
        try:
            while chunk := proc.stdout.read1(64 * 1024):
                shown = log.feed(chunk)
                if shown is None:
                    failure_class = "output_limit"
                    failure = f"the container wrote more than {log.limit} bytes of output; envbuild stopped it"
                    _end(proc)
                    break
                if shown:
                    notify(Output(shown))
            if rest := log.finish():
                notify(Output(rest))
            code = proc.wait()
        except KeyboardInterrupt as exc:
            how = describe(exc)
            log.note(f"interrupted ({how}); stopping apptainer")
            _end(proc)
            code, failure_class, failure = None, "interrupted", f"the run was interrupted ({how})"
        finally:
            proc.stdout.close()
    bad_input = [m for m in (input_error_line(line.decode("utf-8", "replace")) for line in log.lines_seen) if m]
    if failure_class:
        return failure_class, failure
    if code == WORKLOAD_BAD_INPUT and bad_input:
        raise BadWorkloadInput(bad_input[-1])
    if code not in (None, 0):
        failure_class, failure = exit_failure(code, log.tail())
    return failure_class, failure


def _end(proc: subprocess.Popen) -> None:
    """Stop apptainer: SIGTERM (it passes it on to the container), then SIGKILL after 20 s."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def check_sif_network(network: str | None) -> str | None:
    """`--network` of a SIF run: Apptainer shares this host's network, so only `host` (online: no offline settings)
    and `none` (offline, as without the flag) mean something; anything else is bad input, before anything is
    written."""
    if network not in (None, "none", "host"):
        raise RunError(
            f"--network {network[:80]!r}: a SIF shares this host's network; give host (to download inside it) or "
            "none (offline, the default)"
        )
    return network


def exit_failure(code: int, log: str) -> tuple[str, str]:
    """(error class, message) for a non-zero exit of `apptainer exec`: Apptainer's own refusal (FATAL before
    the workload started) is `container_error`, an attempt; the workload dying is `container_died`."""
    if code == APPTAINER_FAILED and "FATAL:" in log and "[workload]" not in log:
        fatal = [line for line in log.splitlines() if "FATAL:" in line][-1].strip()
        return "container_error", f"apptainer could not run the SIF ({fatal})"
    if code == 2:
        return "usage_error", "the workload refused its arguments (exit code 2; see container.log)"
    return "container_died", f"apptainer exec exited with code {code}"
