"""`run workload --apptainer SIF` for a SIF envbuild did not make (a site's PyTorch SIF, LUMI's): named by its
sha256, probed, completed read-only with the workload and the packages it lacks, run offline unless --network."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

from builder.engine import foreign
from builder.engine.foreign import PROBE_TIMEOUT
from builder.engine.run_output import ProbeOutput
from builder.interrupt import later_ctrl_c_ignored
from builder.known_secrets import TOKEN_VARIABLES, hf_token
from builder.engine.apptainer import (
    OUT_BIND,
    apptainer_binary,
    bind_source,
    check_sif_network,
    exec_argv,
    gpu_flags,
    input_binds,
    runtime_record,
    stream_apptainer,
)
from builder.engine.container import check_data, resolve_model, workload_args
from builder.engine.doctor import HostView, host_record
from builder.engine.run_result import RunEnd, envbuild_invocation, run_end
from builder.engine.runner import Notify, Said, SifRun
from builder.paths import file_sha256


def probe(apptainer: str, sif: Path, python: str, timeout: float = PROBE_TIMEOUT) -> foreign.Probe:
    """Run the probe in the SIF (clean environment, contained, no binds; at most MAX_PROBE_OUTPUT bytes read and
    `timeout` seconds) and read its answer. Apptainer runs in a session of its own, which is killed whole on every
    way out (an interrupt included)."""
    output, late = ProbeOutput(), threading.Event()
    proc = subprocess.Popen(
        [apptainer, "exec", "--cleanenv", "--containall", "--pwd", "/tmp", str(sif), *foreign.probe_command(python)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=apptainer_environment(None),
        start_new_session=True,
    )
    timer = threading.Timer(timeout, lambda: late.set() or _kill_session(proc))
    timer.daemon = True
    timer.start()
    try:
        while chunk := proc.stdout.read1(64 * 1024):
            if not output.add(chunk):
                break
    finally:
        timer.cancel()
        with later_ctrl_c_ignored():
            _kill_session(proc)
            proc.wait()
            proc.stdout.close()
    foreign.probe_bounds(f"SIF {sif}", output.over, late.is_set(), timeout)
    return foreign.parse_probe(output.text(), f"SIF {sif}")


def _kill_session(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


#: Apptainer's and Singularity's own settings by environment (APPTAINER_BIND, APPTAINERENV_X, ...): any of them
#: could bind a host path into the container or set a variable in it.
_RUNTIME_SETTINGS = re.compile(r"^(APPTAINER|SINGULARITY)(ENV)?_")
#: What may stay of them: where Apptainer keeps its own cache and temporary files.
_KEPT = {"APPTAINER_CACHEDIR", "APPTAINER_TMPDIR", "SINGULARITY_CACHEDIR", "SINGULARITY_TMPDIR"}


def apptainer_environment(token: str | None) -> dict[str, str]:
    """The environment `apptainer` runs with for a SIF envbuild did not build: this one without Apptainer's and
    Singularity's settings (binds, variables for the container) and without the Hugging Face token variables;
    `token` (only with --pass-hf-token) goes in as APPTAINERENV_HF_TOKEN, never on the command line."""
    env = {
        k: v
        for k, v in os.environ.items()
        if (k in _KEPT or not _RUNTIME_SETTINGS.match(k)) and k not in TOKEN_VARIABLES
    }
    if token:
        env["APPTAINERENV_HF_TOKEN"] = token
    return env


class ForeignSifRunner:
    """The route of a SIF envbuild did not make (no `envbuild sif` record beside it): measured as it is."""

    def run(self, request: SifRun, notify: Notify) -> RunEnd:
        return measure(Path(request.sif).resolve(), request, notify, HostView())


def measure(sif: Path, request: SifRun, notify: Notify, host: HostView) -> RunEnd:
    """Measure `sif` (no `envbuild sif` record beside it) as it is. It writes only into a new folder of the output
    (foreign.IMAGE_OUT) and gets no token, no host variable and no Apptainer setting of this environment unless
    --pass-hf-token (the token alone)."""
    python = foreign.check_python(request.python)
    network = check_sif_network(request.network)
    bind_source(sif, "--apptainer")
    resolve_model(request.model), check_data(request.data)  # bad input before the probe
    apptainer = apptainer_binary()
    sha256 = file_sha256(sif)
    seen = probe(apptainer, sif, python, request.probe_timeout)
    key, missing, deps, flavor = foreign.prepare(notify, seen, sif.name, "made", "the SIF's", request, host.root)
    gpu_flags(flavor, request.gpus)
    out_dir, binds, model_arg, data_arg = input_binds(request)
    written = foreign.image_out(out_dir)
    binds[0] = f"{written}:{OUT_BIND}"
    src = foreign.copy_workload(out_dir.parent)
    try:
        binds += [f"{src}:{foreign.SRC_MOUNT}:ro"] + ([f"{deps}:{foreign.DEPS_MOUNT}:ro"] if deps else [])
        env = tuple(f"{k}={v}" for k, v in foreign.run_environment(network).items())
        argv = exec_argv(
            apptainer,
            sif,
            flavor,
            request.gpus,
            binds,
            [python, "-m", "workload", *workload_args(request, model_arg, data_arg, OUT_BIND)],
            env,
        )
        notify(Said(f"running {sif.name} ({flavor}) with apptainer: {' '.join(argv[1:])}; output -> {out_dir}"))
        started = time.time()
        token = hf_token() if request.pass_hf_token else None
        failure_class, failure = stream_apptainer(argv, out_dir, notify, env=apptainer_environment(token))
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
    }
    block.update(
        foreign.image_record(
            seen, key, missing, block, foreign.host_gpus(host), flavor if flavor != "cpu" else "none", request.gpus
        )
    )
    versions = {"python": seen.python, "torch": seen.torch.version, "hip": seen.torch.hip, "cuda": seen.torch.cuda}
    invocation = envbuild_invocation(request, None)
    invocation["envbuild"] = [a if a != "--local" else "--apptainer" for a in invocation["envbuild"]]
    invocation["envbuild"].insert(invocation["envbuild"].index("--apptainer") + 1, sif.name)
    return run_end(
        out_dir,
        failure_class,
        failure,
        started,
        versions=versions,
        host=host_record(host, site_recipes=request.site_recipes),
        image=block,
        invocation=invocation,
        written_by_image=written,
    )
