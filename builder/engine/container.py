"""Run the workload inside a built image and collect its result.

Device access follows the image's flavor (from its manifest label): ROCm images get /dev/kfd, the
render nodes, the video/render groups, `seccomp=unconfined`, host IPC and a large /dev/shm; CUDA
images get a GPU device request; cpu images get neither. The container is always removed.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import docker
import docker.errors
from docker.types import DeviceRequest, LogConfig, Mount

from builder.interrupt import describe, later_ctrl_c_ignored
from builder.known_secrets import hf_home
from builder.paths import CONTAINER_LOG
from builder.engine.build import MANIFEST_LABEL
from builder.engine.docker import docker_client
from builder.engine.doctor import HostView, host_record, kfd_gpus
from builder.engine.run_output import RunLog
from builder.engine.run_result import RunEnd, check_out_dir, envbuild_invocation, run_end
from builder.engine.runner import ContainerRun, Notify, Output, RunRequest, Said

OUT_MOUNT, MODEL_MOUNT, DATA_MOUNT, HF_MOUNT = "/out", "/model", "/data", "/hf-cache"
WORKLOAD_ENTRYPOINT = ["python3", "-m", "workload"]
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


WORKLOAD_BAD_INPUT = 2  # the workload's exit code for bad input (with its bad-input line): it wrote no result
_BAD_INPUT_MARK = "[workload] bad input: "


class RunError(RuntimeError):
    """The run could not start (bad input, no engine, unknown image): nothing was recorded."""


class BadWorkloadInput(RunError):
    """The workload refused its input (data, model, arguments) with exit code 2: not an environment verdict."""

    def __init__(self, message: str):
        super().__init__(f"{message} (no result written, nothing recorded)")


def input_error_line(line: str) -> str | None:
    """The message of the workload's bad-input line, None for any other line."""
    _, mark, message = line.partition(_BAD_INPUT_MARK)
    return message.strip() or None if mark else None


def resolve_model(model: str | None) -> tuple[str | None, Path | None]:
    """("hub id", None) or (None, local path); a path that does not exist is a clear error."""
    if model is None:
        return None, None
    path = Path(model).expanduser()
    if path.exists():
        return None, path.resolve()
    if model.startswith((".", "/", "~")) or not _HUB_ID.fullmatch(model):
        raise RunError(
            f"--model {model}: no such file or directory (give a local model dir or a hub id such as google/gemma-2b)"
        )
    return model, None


def check_data(data: Path | None) -> Path | None:
    if data is None:
        return None
    data = Path(data).expanduser()
    if not data.exists():
        raise RunError(f"--data {data}: no such file or directory")
    return data.resolve()


def workload_args(request: RunRequest, model_arg: str | None, data_arg: str | None, out_arg: str) -> list[str]:
    """`train` arguments for the workload CLI (`python -m workload train ...`)."""
    args = ["train", "--preset", request.preset, "--out", out_arg]
    if model_arg:
        args += ["--model", model_arg]
    if data_arg:
        args += ["--data", data_arg]
    return args + list(request.extra_args)


def image_labels_manifest(image) -> dict | None:
    raw = (image.labels or {}).get(MANIFEST_LABEL)
    return json.loads(raw) if raw else None


def image_block(image, requested: str) -> dict:
    """The result's `image` block: tag (the one asked for, when the image carries several), digest, manifest."""
    digests = image.attrs.get("RepoDigests") or []
    return {
        "tag": requested if requested in image.tags else (image.tags[0] if image.tags else image.id),
        "id": image.id,
        "digest": digests[0].split("@", 1)[1] if digests else image.id,
        "manifest": image_labels_manifest(image),
    }


def flavor_of(manifest: dict | None) -> str:
    cell = (manifest or {}).get("cell") or {}
    return cell.get("flavor") or (manifest or {}).get("flavor") or "cpu"


def _parse_gpus(gpus: str | None) -> list[int] | None:
    """None/"all" -> None (every GPU); "0,1" -> [0, 1]."""
    if gpus in (None, "all"):
        return None
    try:
        return [int(i) for i in gpus.split(",")]
    except ValueError:
        raise RunError(f"--gpus {gpus}: use 'all' or comma-separated GPU indices such as 0,1") from None


def device_options(flavor: str, gpus: str | None, host: HostView) -> dict:
    """docker SDK `containers.create` keyword arguments giving the container its accelerators."""
    if flavor == "rocm":
        selected = _parse_gpus(gpus)
        dri = host.path("/dev/dri")
        if not host.path("/dev/kfd").exists():
            raise RunError(
                "this ROCm image needs /dev/kfd, which this host lacks: load the amdgpu "
                "driver (see `envbuild doctor`) or run a cpu image / --local"
            )
        if selected is None:
            nodes = ["/dev/dri"]
        else:
            known = kfd_gpus(host)
            bad = [i for i in selected if i >= len(known) or known[i].render_minor is None]
            if bad:
                raise RunError(
                    f"--gpus {gpus}: this host has GPUs 0..{len(known) - 1} (see `envbuild doctor`), not {bad}"
                )
            nodes = [f"/dev/dri/renderD{known[i].render_minor}" for i in selected]
        gids = sorted({os.stat(p).st_gid for p in (host.path("/dev/kfd"), *dri.glob("renderD*"))})
        return {
            "devices": [f"{host.path(p)}:{p}:rwm" for p in ["/dev/kfd", *nodes]],
            "group_add": ["video", *[str(g) for g in gids]],
            "security_opt": ["seccomp=unconfined"],
            "ipc_mode": "host",
        }
    if flavor == "cuda":
        selected = _parse_gpus(gpus)
        request = (
            DeviceRequest(count=-1, capabilities=[["gpu"]])
            if selected is None
            else DeviceRequest(device_ids=[str(i) for i in selected], capabilities=[["gpu"]])
        )
        return {"device_requests": [request], "ipc_mode": "host"}
    if gpus:
        raise RunError(f"--gpus {gpus}: the image is a {flavor} image; it runs without GPUs")
    return {}


#: The engine's own network modes, and the grammar of a network's name (`docker network create`'s).
ENGINE_NETWORKS = ("none", "host", "bridge")
NETWORK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def check_network(client, network: str | None) -> str | None:
    """`--network`: none, host, bridge or the name of a network this engine has; RunError (bad input) for anything
    else, before anything is written (another container's namespace, `container:NAME`, is not offered)."""
    if network is None or network in ENGINE_NETWORKS:
        return network
    if not NETWORK_NAME.fullmatch(network):
        raise RunError(f"--network {network[:80]!r}: give none, host, bridge or the name of a Docker network")
    try:
        names = {n.name for n in client.networks.list(names=[network])}
    except docker.errors.APIError as exc:
        raise RunError(
            f"--network {network}: the engine did not list its networks ({exc.explanation or exc})"
        ) from None
    if network not in names:
        raise RunError(
            f"--network {network}: this engine has no such network (`docker network ls` lists them; none, host and "
            "bridge are always there)"
        )
    return network


def local_image(client, tag: str):
    """The engine's image `tag`; RunError (bad input) when it is not here."""
    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        raise RunError(
            f"image {tag} not found locally: build it with `envbuild image ...` or `docker pull {tag}`"
        ) from None
    except docker.errors.APIError as exc:
        raise RunError(f"image {tag}: {exc.explanation or exc}") from None


class ContainerRunner:
    """The route of an image `envbuild image` built (its manifest label): run as built, its flavor's devices."""

    def run(self, request: ContainerRun, notify: Notify) -> RunEnd:
        """Run the workload in `request.image` and stream its output; how it ended (the workflow completes the
        result)."""
        host = HostView()
        client = docker_client()
        image = local_image(client, request.image)
        manifest = image_labels_manifest(image)
        hub_id, model_dir = resolve_model(request.model)
        data = check_data(request.data)
        flavor = flavor_of(manifest)
        devices = device_options(flavor, request.gpus, host)
        check_network(client, request.network)
        out_dir = check_out_dir(request.out_dir)
        mounts, environment, model_arg, data_arg = input_mounts(out_dir, hub_id, model_dir, data)
        command = workload_args(request, model_arg, data_arg, OUT_MOUNT)
        failure_class, failure, started = stream_container(
            client,
            request,
            command,
            WORKLOAD_ENTRYPOINT,
            mounts,
            environment,
            devices,
            out_dir,
            notify,
            flavor,
            request.network,
        )
        cell = (manifest or {}).get("cell") or {}  # what is known without the workload: the cell's lines
        return run_end(
            out_dir,
            failure_class,
            failure,
            started,
            versions={k: cell.get(k) for k in ("python", "torch")},
            host=host_record(host, site_recipes=request.site_recipes),
            image=image_block(image, request.image),
            invocation=envbuild_invocation(request, request.image),
        )


def input_mounts(
    out_dir: Path, hub_id: str | None, model_dir: Path | None, data: Path | None, *, hf_token: bool = True
):
    """(mounts, environment, model argument, data argument): the output, the model and the data. With a hub id,
    the Hub's cache is mounted read-only; `hf_token` (envbuild's own images; an image envbuild did not build only
    with --pass-hf-token) adds $HF_TOKEN and the whole of $HF_HOME, token file included. Without it only the
    cache's hub/ folder goes in (the downloaded models, no token)."""
    mounts = [Mount(OUT_MOUNT, str(out_dir), type="bind")]
    environment = {"PYTHONUNBUFFERED": "1", "HOME": "/tmp"}
    model_arg = data_arg = None
    if model_dir:
        mounts.append(Mount(MODEL_MOUNT, str(model_dir), type="bind", read_only=True))
        model_arg = MODEL_MOUNT
    elif hub_id:
        model_arg = hub_id
        hf_cache = hf_home()
        cache = hf_cache if hf_token else Path(os.environ.get("HF_HUB_CACHE") or hf_cache / "hub")
        if cache.is_dir():
            target = HF_MOUNT if hf_token else f"{HF_MOUNT}/hub"
            mounts.append(Mount(target, str(cache), type="bind", read_only=True))
            environment["HF_HOME"] = HF_MOUNT
    if data:  # a file keeps its name (the workload tells JSONL from CSV by it)
        data_arg = DATA_MOUNT if data.is_dir() else f"{DATA_MOUNT}/{data.name}"
        mounts.append(Mount(data_arg, str(data), type="bind", read_only=True))
    if hf_token and (token := os.environ.get("HF_TOKEN")):
        environment["HF_TOKEN"] = token  # handed to the engine, never printed
    return mounts, environment, model_arg, data_arg


def stream_container(
    client,
    run: ContainerRun,
    command: list[str],
    entrypoint: list[str],
    mounts: list,
    environment: dict,
    devices: dict,
    out_dir: Path,
    notify: Notify,
    flavor: str,
    network: str | None,
) -> tuple[str | None, str, float]:
    """Run the workload container, stream its output (scrubbed of known secrets, at most MAX_RUN_OUTPUT bytes) to
    container.log and to `notify` (Output), remove it on every way out; returns (failure class, failure, start
    time). The workload refusing its input raises BadWorkloadInput."""
    name = f"envbuild-run-{uuid.uuid4().hex[:12]}"
    notify(Said(f"running {run.image} ({flavor}) as {name}: {' '.join(entrypoint + command)}; output -> {out_dir}"))
    user = None if os.getuid() == 0 else f"{os.getuid()}:{os.getgid()}"
    started = time.time()
    container = None
    failure_class, failure = None, ""
    log = RunLog(out_dir / CONTAINER_LOG)  # before the container exists: it never chooses where this goes
    log.watch_lines(lambda line: input_error_line(line) is not None)
    try:
        container = client.containers.create(
            run.image,
            command=command,
            entrypoint=entrypoint,
            name=name,
            mounts=mounts,
            environment=environment,
            user=user,
            shm_size=run.shm_size,
            network_mode=network,
            labels={"org.envbuild.run": name},
            log_config=NO_ENGINE_LOG,
            **devices,
        )
        with attached_output(container) as output:
            for chunk in output:
                shown = log.feed(chunk)
                if shown is None:
                    failure_class = "output_limit"
                    failure = f"the container wrote more than {log.limit} bytes of output; envbuild stopped it"
                    break
                if shown:
                    notify(Output(shown))
        if failure_class:
            kill(container)
        if rest := log.finish():
            notify(Output(rest))
        status = container.wait()
        exit_code = status.get("StatusCode", -1)
        bad_input = [m for m in (input_error_line(line.decode("utf-8", "replace")) for line in log.lines_seen) if m]
        if failure_class is None and exit_code == WORKLOAD_BAD_INPUT and bad_input:
            raise BadWorkloadInput(bad_input[-1])
        if failure_class is None and exit_code != 0:
            state = client.api.inspect_container(container.id)["State"]
            failure_class = "oom_killed" if state.get("OOMKilled") else "container_died"
            failure = f"the container exited with code {exit_code}" + (
                " (OOM-killed)" if state.get("OOMKilled") else ""
            )
            if exit_code == 2 and not state.get("OOMKilled"):
                failure_class, failure = (
                    "usage_error",
                    f"the workload refused its arguments (exit code 2; see {CONTAINER_LOG})",
                )
    except KeyboardInterrupt as exc:
        how = describe(exc)
        failure_class, failure = "interrupted", f"the run was interrupted ({how})"
        log.note(f"interrupted ({how}); stopping the container")
        if container is not None:
            _stop_container(container)
    except docker.errors.APIError as exc:
        failure_class, failure = "container_error", f"the engine refused the container: {exc.explanation or exc}"
    finally:
        log.close()
        if not remove_container(client, container or name):
            notify(Said(f"could not remove container {name}; remove it with `docker rm -f {name}`", "warning"))
    return failure_class, failure, started


#: The engine keeps no copy of a run's or probe's output (container.log is envbuild's, bounded; the engine's own
#: log of a container that floods would grow unbounded on its disk until the container is removed).
NO_ENGINE_LOG = LogConfig(type=LogConfig.types.NONE)


@contextmanager
def attached_output(container):
    """Start `container` and give its output (stdout and stderr as they come, an iterator of bytes) until it ends or
    the block is left. Attached before it starts, so nothing is missed, with no engine log (NO_ENGINE_LOG); read as
    the engine copies it (tens of KB a chunk, about 25 MB/s here; the logs endpoint yields one line at a time, about
    0.7 MB/s), with no read timeout (a quiet training step may take hours). An attached reader holds a container's
    writes back, so leaving the block closes the stream: a container stopped afterwards is not waiting on it."""
    api = docker.from_env(timeout=None).api  # the engine's own settings (DOCKER_HOST, ...), no read timeout
    try:
        stream = api.attach(container.id, stdout=True, stderr=True, stream=True, logs=False)
        try:
            container.start()
            yield stream
        finally:
            stream.close()
    finally:
        api.close()


def kill(container) -> None:
    """Kill `container`; nothing when it has ended meanwhile."""
    try:
        container.kill()
    except docker.errors.APIError:
        pass


def remove_container(client, container) -> bool:
    """Remove `container` (an SDK container, or the name it was created under: a create that an interrupt cut
    short may have made it), running or not, with further Ctrl-Cs ignored meanwhile; False when the engine refused."""
    with later_ctrl_c_ignored():
        try:
            if isinstance(container, str):
                container = client.containers.get(container)
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError:
            return False
    return True


def _stop_container(container) -> None:
    """Give the workload a chance to write an `interrupted` result (SIGINT), then kill."""
    try:
        container.kill(signal="SIGINT")
        container.wait(timeout=20)
    except Exception:  # noqa: BLE001 - whatever state it is in, the next step kills and removes it
        try:
            container.kill()
        except docker.errors.APIError:
            pass
