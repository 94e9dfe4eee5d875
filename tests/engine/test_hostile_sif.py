"""The hostile image (tests/hostile_images.py) as a SIF envbuild did not make, run through the real CLI on the
one-node Slurm + Apptainer cluster (.ci/hpc_cluster.sh): Apptainer hands a container the host's environment and
its settings (APPTAINERENV_*, APPTAINER_BIND) unless told not to, so those are set here and must not reach it; its
probe is bounded in bytes and time; its lie about a GPU is exit 2; its links never reach a host file. The jobs'
user differs from the tests' (see test_hpc.py): what the run reads or writes lives in a folder open to that user."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from foreign_images import sif_from_image
from hpc_fixtures import HPC_BIN, cluster_wrappers, job_user_folder
from hostile_images import build_hostile_image, measured

from builder.bounded_read import read_file

pytestmark = [pytest.mark.docker, pytest.mark.hpc, pytest.mark.slow]
ENVBUILD = str(Path(sys.executable).parent / "envbuild")
TOKEN = "hf_hostileSifTokenValue0123456789abcdef"
VICTIM_TEXT = "a host file the SIF must not reach\n"


@pytest.fixture(scope="module")
def shared():
    cluster_wrappers("apptainer")
    with job_user_folder("envbuild-hostile-sif-") as path:
        yield path


@pytest.fixture(scope="module")
def hostile_sif(shared, local_base, docker_engine, tmp_path_factory) -> Path:
    # a tag of its own: the image holds results dated when it was built, so each build is a new image, and the other
    # lane's tests (tests/engine/test_hostile_image.py) find their containers by the id their tag had
    tag = build_hostile_image(
        local_base, tmp_path_factory.mktemp("hostile-sif-image"), tag="envbuild-test/hostile-sif:1"
    )
    return sif_from_image(docker_engine, tag, shared / "hostile.sif", HPC_BIN / "apptainer", timeout=600)


@pytest.fixture()
def host(shared, tmp_path):
    work = Path(tempfile.mkdtemp(prefix="case-", dir=shared))
    work.chmod(0o1777)
    victim = work / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    victim.chmod(0o666)  # writable by the job user: only a followed link could change it
    env = {
        **os.environ,
        "PATH": f"{HPC_BIN}{os.pathsep}{os.environ['PATH']}",
        "XDG_CACHE_HOME": str(work / "cache"),
        "HF_TOKEN": TOKEN,
        "APPTAINERENV_HF_TOKEN": TOKEN,
        "APPTAINERENV_SMUGGLED": "from-the-host",
        "APPTAINER_BIND": f"{work}:/smuggled",
        "SSH_AUTH_SOCK": str(work / "ssh-agent.sock"),
    }
    yield {"env": env, "victim": victim, "out": work / "run", "db": tmp_path / "m.db", "dir": work}
    shutil.rmtree(work, ignore_errors=True)


def _envbuild(host: dict, *args: str) -> dict:
    ran = measured([ENVBUILD, "run", "workload", *args], env=host["env"], cwd=host["dir"], timeout=300)
    ran["text"] = ran["output"].decode("utf-8", "replace")
    print(
        f"\n[measured] {' '.join(args[:4])}: exit {ran['code']}, {ran['rss_mb']:.0f} MB peak RSS, {ran['seconds']:.1f} s"
    )
    return ran


def test_a_lying_sif_is_exit_2_and_gets_nothing_of_the_host(hostile_sif, host):
    host["out"].mkdir()
    host["out"].chmod(0o1777)  # the job user writes the image's folder in it (made with the same mode)
    ran = _envbuild(
        host,
        *("--apptainer", str(hostile_sif), "--out", str(host["out"]), "--db", str(host["db"])),
        *("--", "--claim", "gpu", "--victim", str(host["victim"])),
    )
    assert ran["code"] == 2, ran["text"][-3000:]
    assert "gfx90a" in ran["text"] and "passed no GPU into the container" in ran["text"]
    assert host["victim"].read_text() == VICTIM_TEXT
    assert not (host["out"] / "result.json").exists() and not host["db"].exists()
    log = read_file(host["out"] / "container.log", 1 << 20).decode()
    env = next(line for line in log.splitlines() if line.startswith("HOSTILE-ENV"))
    assert TOKEN not in log and TOKEN not in ran["text"] and "HF_TOKEN" not in env
    assert "SMUGGLED" not in env and "/smuggled" not in log  # Apptainer's settings from this environment: none
    assert "SSH_AUTH_SOCK" not in env
    assert "\x1b" not in ran["text"] and "\\x1b]8;;https://evil.example/" in ran["text"]


@pytest.mark.parametrize(
    ("python", "says"),
    [
        ("python3-huge", "more than 1048576 bytes"),
        ("python3-hang", "did not answer within 5 s"),
        ("python3-escapes", "has no usable torch"),
    ],
)
def test_a_hostile_sif_probe_is_exit_2_in_bounded_time_and_memory(hostile_sif, host, python, says):
    ran = _envbuild(
        host,
        *("--apptainer", str(hostile_sif), "--python", python, "--probe-timeout", "5"),
        *("--out", str(host["out"]), "--db", str(host["db"])),
    )
    assert ran["code"] == 2, ran["text"][-3000:]
    assert says in ran["text"]
    assert ran["rss_mb"] < 400 and ran["seconds"] < 90
    assert "\x1b" not in ran["text"]
    assert not host["out"].exists() and not host["db"].exists()
    pattern = f"{hostile_sif}|/hostile/bin/{python} ".replace(".", "[.]")
    assert not _outliving(pattern)  # neither apptainer nor the probe outlives envbuild


def test_a_sif_run_that_floods_its_log_is_stopped_at_the_cap(hostile_sif, host):
    host["out"].mkdir()
    host["out"].chmod(0o1777)
    ran = _envbuild(
        host,
        *("--apptainer", str(hostile_sif), "--out", str(host["out"]), "--db", str(host["db"])),
        *("--", "--claim", "cpu", "--flood"),
    )
    assert ran["code"] == 1, ran["text"][-3000:]
    assert '"error_class": "output_limit"' in (host["out"] / "result.json").read_text()
    assert len(read_file(host["out"] / "container.log", 65 << 20)) < (64 << 20) + 4096
    assert ran["rss_mb"] < 400
    assert not _outliving(str(hostile_sif).replace(".", "[.]"))


def _outliving(pattern: str) -> list[str]:
    """`pgrep -af pattern`'s lines for processes outside Docker's containers: the other lane's hostile image runs the
    same /hostile programs, under a containerd shim."""
    found = subprocess.run(["pgrep", "-af", pattern], capture_output=True, text=True).stdout.splitlines()
    return [line for line in found if not _in_a_container(line.split()[0])]


def _in_a_container(pid: str) -> bool:
    while pid not in ("0", "1"):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:  # ended meanwhile
            return False
        if stat[stat.index("(") + 1 : stat.rindex(")")].startswith("containerd-shim"):
            return True
        pid = stat[stat.rindex(")") + 2 :].split()[1]  # the parent
    return False
