"""`run workload --image TAG` for a Docker image envbuild did not build: probe it, bring in the workload and
the packages it lacks read-only, run it with no network unless --network, record it by its digest."""

from __future__ import annotations

import time

import docker.errors
from docker.types import Mount
from rich.console import Console

from builder.engine import foreign
from builder.engine.container import (
    OUT_MOUNT,
    ContainerRun,
    RunError,
    device_options,
    image_block,
    input_mounts,
    stream_container,
    workload_args,
)
from builder.engine.doctor import HostView, host_record
from builder.engine.run_result import RunEnd, check_out_dir, envbuild_invocation


def probe(client, image_id: str, python: str, where: str) -> foreign.Probe:
    """Run the probe in the image (no network, removed afterwards) and read its answer."""
    try:
        output = client.containers.run(
            image_id,
            command=foreign.probe_command(python)[1:],
            entrypoint=[python],
            network_mode="none",
            remove=True,
            stdout=True,
            stderr=True,
        )
    except docker.errors.ContainerError as exc:
        output = exc.stderr or b""
    except docker.errors.APIError as exc:
        raise RunError(f"{where}: the engine refused the probe container: {exc.explanation or exc}") from None
    return foreign.parse_probe(output.decode("utf-8", "replace"), where)


def run(client, image, request: ContainerRun, console: Console, host: HostView, hub_id, model_dir, data) -> RunEnd:
    """Measure `image` (no envbuild manifest) as it is; the result's image block says what was probed and brought."""
    python = foreign.check_python(request.python)
    out_dir = check_out_dir(request.out_dir)
    where = f"image {request.image}"
    seen = probe(client, image.id, python, where)
    key, missing, deps, flavor = foreign.prepare(console, seen, where, "built", "the image's", request, host.root)
    devices = device_options(flavor, request.gpus, host)
    mounts, environment, model_arg, data_arg = input_mounts(out_dir, hub_id, model_dir, data)
    environment.update(foreign.run_environment(bool(request.network)))
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
            console,
            flavor,
            request.network or "none",
        )
    finally:
        foreign.remove_copy(src)
    block = {
        **image_block(image, request.image),
        "environment": "docker",
        **foreign.image_record(seen, key, missing, request.image),
    }
    versions = {"python": seen.python, "torch": seen.torch.version, "hip": seen.torch.hip, "cuda": seen.torch.cuda}
    return RunEnd(
        out_dir,
        failure_class=failure_class,
        failure=failure,
        started=started,
        finished=time.time(),
        versions=versions,
        host=host_record(host, site_recipes=request.site_recipes),
        image=block,
        invocation=envbuild_invocation(request, request.image),
    )
