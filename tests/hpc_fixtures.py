"""The one-node Slurm + Apptainer cluster of .ci/hpc_cluster.sh, as the HPC and SIF tests reach it: its wrappers
(sbatch, sacct, apptainer, ... entering the cluster's namespaces as the job user) in $ENVBUILD_HPC_BIN (default
/run/envbuild-hpc/bin), and folders that user can write (pytest's own tmp root is kept 0700)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

HPC_BIN = Path(os.environ.get("ENVBUILD_HPC_BIN", "/run/envbuild-hpc/bin"))


def cluster_wrappers(*names: str, slurm_answers: bool = False) -> Path:
    """HPC_BIN when it holds every wrapper in `names` (and, with `slurm_answers`, `sinfo` answers); otherwise the
    test skips, or fails under ENVBUILD_REQUIRE_HPC=1 (as CI's phase 2 sets)."""
    ok = all((HPC_BIN / name).is_file() for name in names)
    if ok and slurm_answers:
        ok = subprocess.run([HPC_BIN / "sinfo", "-h"], capture_output=True, timeout=60).returncode == 0
    if ok:
        return HPC_BIN
    reason = f"no Slurm + Apptainer cluster wrappers in {HPC_BIN} (start one: bash .ci/hpc_cluster.sh start)"
    if os.environ.get("ENVBUILD_REQUIRE_HPC") == "1":
        pytest.fail(f"ENVBUILD_REQUIRE_HPC=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@contextmanager
def job_user_folder(prefix: str) -> Iterator[Path]:
    """A temporary folder under /tmp that the cluster's job user can write (mode 1777), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
