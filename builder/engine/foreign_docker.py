"""`run workload --image TAG` for a Docker image envbuild did not build: probe it, bring in the workload and
the packages it lacks read-only, run it with no network unless --network, record it by its digest."""

from __future__ import annotations

import re
import threading
import uuid

import docker.errors
from docker.types import Mount

from builder.engine import foreign
from builder.engine.container import (
    OUT_MOUNT,
    NO_ENGINE_LOG,
    RunError,
    attached_output,
    check_data,
    check_network,
    device_options,
    image_block,
    input_mounts,
    kill,
    local_image,
    remove_container,
    resolve_model,
    stream_container,
    workload_args,
)
from builder.engine.docker import docker_client
from builder.engine.doctor import HostView, host_record
from builder.engine.foreign import PROBE_TIMEOUT
from builder.engine.run_output import ProbeOutput
from builder.engine.run_result import RunEnd, check_out_dir, envbuild_invocation, run_end
from builder.engine.runner import ContainerRun, Notify


def probe(client, image_id: str, python: str, where: str, timeout: float = PROBE_TIMEOUT) -> foreign.Probe:
    """Run the probe in the image (no network, no mounts, at most MAX_PROBE_OUTPUT bytes read and `timeout`
    seconds) and read its answer; the container is removed on every way out (an interrupt included)."""
    name = f"envbuild-probe-{uuid.uuid4().hex[:12]}"
    output, late = ProbeOutput(), threading.Event()
    container = None
    try:
        container = client.containers.create(
            image_id,
            command=foreign.probe_command(python)[1:],
            entrypoint=[python],
            name=name,
            network_mode="none",
            labels={"org.envbuild.probe": name},
            log_config=NO_ENGINE_LOG,
        )
        timer = threading.Timer(timeout, lambda: late.set() or kill(container))
        timer.daemon = True
        try:
            with attached_output(container) as stream:
                timer.start()
                for chunk in stream:
                    if not output.add(chunk):
                        break
        finally:
            timer.cancel()
    except docker.errors.APIError as exc:
        raise RunError(f"{where}: the engine refused the probe container: {exc.explanation or exc}") from None
    finally:
        remove_container(client, container or name)
    foreign.probe_bounds(where, output.over, late.is_set(), timeout)
    return foreign.parse_probe(output.text(), where)


class ForeignImageRunner:
    """The route of a Docker image envbuild did not build (no envbuild manifest): measured as it is."""

    def run(self, request: ContainerRun, notify: Notify) -> RunEnd:
        client = docker_client()
        image = local_image(client, request.image)
        hub_id, model_dir = resolve_model(request.model)
        data = check_data(request.data)
        return measure(client, image, request, notify, HostView(), hub_id, model_dir, data)


def measure(client, image, request: ContainerRun, notify: Notify, host: HostView, hub_id, model_dir, data) -> RunEnd:
    """Measure `image` (no envbuild manifest) as it is; the result's image block says what was probed and brought,
    and what this host checked itself. The image writes only into a new folder of the output (foreign.IMAGE_OUT);
    it gets no token unless --pass-hf-token."""
    python = foreign.check_python(request.python)
    network = check_network(client, request.network) or "none"
    where = f"image {request.image}"
    seen = probe(client, image.id, python, where, request.probe_timeout)
    key, missing, deps, flavor = foreign.prepare(notify, seen, where, "built", "the image's", request, host.root)
    devices = device_options(flavor, request.gpus, host)
    out_dir = check_out_dir(request.out_dir)
    written = foreign.image_out(out_dir)
    mounts, environment, model_arg, data_arg = input_mounts(
        written, hub_id, model_dir, data, hf_token=request.pass_hf_token
    )
    environment.update(foreign.run_environment(network))
    src = foreign.copy_workload(out_dir.parent)
    try:
        mounts.append(Mount(foreign.SRC_MOUNT, str(src), type="bind", read_only=True))
        if deps is not None:
            mounts.append(Mount(foreign.DEPS_MOUNT, str(deps), type="bind", read_only=True))
        command = workload_args(request, model_arg, data_arg, OUT_MOUNT)
        failure_class, failure, started = stream_container(
            client,
            request,
            command,
            [python, "-m", "workload"],
            mounts,
            environment,
            devices,
            out_dir,
            notify,
            flavor,
            network,
        )
    finally:
        foreign.remove_copy(src)
    block = {**image_block(image, request.image), "environment": "docker", "repo_digests": repo_digests(image)}
    block.update(
        foreign.image_record(
            seen, key, missing, block, foreign.host_gpus(host), flavor if flavor != "cpu" else "none", request.gpus
        )
    )
    versions = {"python": seen.python, "torch": seen.torch.version, "hip": seen.torch.hip, "cuda": seen.torch.cuda}
    return run_end(
        out_dir,
        failure_class,
        failure,
        started,
        versions=versions,
        host=host_record(host, site_recipes=request.site_recipes),
        image=block,
        invocation=envbuild_invocation(request, request.image),
        written_by_image=written,
    )


#: A RepoDigest as the engine reports it: `[registry/]repository@sha256:<64 hex>`.
_REPO_DIGEST = re.compile(r"[a-z0-9][a-z0-9._/:-]{0,254}@sha256:[0-9a-f]{64}")


def repo_digests(image) -> list[str]:
    """The engine's RepoDigests of `image` (where it was pulled from, by digest; none for a local build, tag or
    loaded archive), those of a known shape, at most 16."""
    found = image.attrs.get("RepoDigests") or []
    return [d for d in found if isinstance(d, str) and _REPO_DIGEST.fullmatch(d)][:16]
