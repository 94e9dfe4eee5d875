"""A workload run: in a built image, in a SIF or on this host (`run_workload`), its result completed, and
filed in the matrix with its attempt directory (`record_run`)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape

from builder.engine.run_result import write_json_atomic
from builder.store.store import MatrixStore, RecordedRun
from builder.paths import IMAGE_OUT
from builder.workflows.run_identity import check_foreign_claims
from builder.workflows.run_result import finalize, keep_run
from workload.result import RESULT_FILE


def run_workload(
    request: dict,
    image: str | None,
    sif: Path | None,
    shm_size: str,
    network: str | None,
    console: Console,
    foreign: dict | None = None,
    venv: Path | None = None,
) -> dict:
    """Run the workload (`request`: RunRequest's fields) in `image`, in `sif` or here, and return its final
    result.json. An image, SIF or venv (`venv`) envbuild did not build is measured as it is (`foreign`: the options of
    that route, builder.engine.foreign). Here, without the workload's packages, the run takes the managed workload
    environment (builder.workflows.local_routes). The engine's RunError (bad input), EngineUnavailable and interrupts
    pass through. The result of an image envbuild did not build must agree with what this host checked
    (run_identity: IdentityMismatch, a RunError, before anything is written)."""
    from builder.engine.container import ContainerRun, RunRequest

    foreign = foreign or {}
    if sif:
        from builder.engine.any_image import run_sif
        from builder.engine.apptainer import SifRun

        end = run_sif(SifRun(**request, sif=sif, network=network, **foreign), console)
    elif image:
        from builder.engine.any_image import run_image

        end = run_image(ContainerRun(**request, image=image, shm_size=shm_size, network=network, **foreign), console)
    else:
        from builder.workflows.local_routes import run_here

        def notify(line: str) -> None:
            console.print(escape(line), highlight=False)

        end, check = run_here(RunRequest(**request), console, notify, venv, foreign.get("wheels"))
        result = finalize(end)
        contradiction = check(result) if check else None
        if contradiction:  # the host read the environment's files: what the run reported is refused
            result.update(status="error", error_class="input_error", error=contradiction)
            write_json_atomic(Path(end.out_dir) / RESULT_FILE, result)
        return result
    return finalize(end, check=lambda result: check_foreign_claims(result, end.out_dir))


def record_run(store: MatrixStore, result: dict, result_path: Path) -> RecordedRun:
    """File the run whose result lies at `result_path` into `store`: its attempt directory, then its row
    (StoreError when the store refuses it)."""
    foreign = (result.get("image") or {}).get("origin") == "foreign"  # envbuild's own record of the run
    attempt = keep_run(store.path, result_path.parent, result, result_path.parent / IMAGE_OUT if foreign else None)
    return store.record_run(result, source=str(result_path), attempt_dir=attempt)
