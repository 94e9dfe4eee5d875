"""`run workload --apptainer SIF` for a SIF envbuild did not make (a site's PyTorch SIF, LUMI's): named by its
sha256, probed, completed read-only with the workload and the packages it lacks, run offline unless --network."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from builder.engine import foreign
from builder.engine.apptainer import (
    OUT_BIND,
    SifRun,
    apptainer_binary,
    bind_source,
    exec_argv,
    gpu_flags,
    input_binds,
    runtime_record,
    stream_apptainer,
)
from builder.engine.container import workload_args
from builder.engine.doctor import HostView, host_record
from builder.engine.run_result import RunEnd, envbuild_invocation
from builder.paths import file_sha256


def probe(apptainer: str, sif: Path, python: str) -> foreign.Probe:
    proc = subprocess.run(
        [apptainer, "exec", "--cleanenv", "--containall", "--pwd", "/tmp", str(sif), *foreign.probe_command(python)],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=600,
    )
    return foreign.parse_probe(proc.stdout + proc.stderr, f"SIF {sif}")


def run(sif: Path, request: SifRun, console: Console, host: HostView) -> RunEnd:
    """Measure `sif` (no `envbuild sif` record beside it) as it is."""
    python = foreign.check_python(request.python)
    bind_source(sif, "--apptainer")
    out_dir, binds, model_arg, data_arg = input_binds(request)
    apptainer = apptainer_binary()
    sha256 = file_sha256(sif)
    seen = probe(apptainer, sif, python)
    key, missing, deps, flavor = foreign.prepare(console, seen, sif.name, "made", "the SIF's", request, host.root)
    gpu_flags(flavor, request.gpus)
    src = foreign.copy_workload(out_dir.parent)
    try:
        binds += [f"{src}:{foreign.SRC_MOUNT}:ro"] + ([f"{deps}:{foreign.DEPS_MOUNT}:ro"] if deps else [])
        env = tuple(f"{k}={v}" for k, v in foreign.run_environment(bool(request.network)).items())
        argv = exec_argv(
            apptainer,
            sif,
            flavor,
            request.gpus,
            binds,
            [python, "-m", "workload", *workload_args(request, model_arg, data_arg, OUT_BIND)],
            env,
        )
        console.print(
            escape(f"running {sif.name} ({flavor}) with apptainer: {' '.join(argv[1:])}; output -> {out_dir}")
        )
        started = time.time()
        failure_class, failure = stream_apptainer(argv, out_dir, console)
    finally:
        foreign.remove_copy(src)
    block = {
        "tag": str(sif),
        "id": f"sha256:{sha256}",
        "digest": f"sha256:{sha256}",
        "manifest": None,
        "environment": "apptainer",
        "sif": {"path": str(sif), "sha256": sha256, "route": None},
        "runtime": runtime_record(apptainer),
        **foreign.image_record(seen, key, missing, str(sif)),
    }
    versions = {"python": seen.python, "torch": seen.torch.version, "hip": seen.torch.hip, "cuda": seen.torch.cuda}
    invocation = envbuild_invocation(request, None)
    invocation["envbuild"] = [a if a != "--local" else "--apptainer" for a in invocation["envbuild"]]
    invocation["envbuild"].insert(invocation["envbuild"].index("--apptainer") + 1, sif.name)
    return RunEnd(
        out_dir,
        failure_class=failure_class,
        failure=failure,
        started=started,
        finished=time.time(),
        versions=versions,
        host=host_record(host, site_recipes=request.site_recipes),
        image=block,
        invocation=invocation,
    )
