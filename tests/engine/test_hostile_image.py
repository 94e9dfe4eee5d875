"""An image built to attack the host that measures it (tests/hostile_images.py), run through the real CLI with a real
engine: it writes nothing outside envbuild's own files, sees no token, gets no GPU verdict on a host without that
GPU, is labelled by a verified digest only, prints nothing that steers the terminal, and leaves no container
behind. Each case is exit 2 with nothing recorded, or a record that says plainly what was measured; peak RSS and
time are measured with /usr/bin/time."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostile_images import AMD_NAMED, build_hostile_image, measured

from builder.bounded_read import read_file

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ENVBUILD = str(Path(sys.executable).parent / "envbuild")
TOKEN = "hf_hostileTestTokenValue0123456789abcdef"
FILE_TOKEN = "hf_fromTheTokenFile9876543210fedcba"
VICTIM_TEXT = "a host file the image must not reach\n"


@pytest.fixture(scope="module")
def hostile(local_base, docker_engine, tmp_path_factory):
    tag = build_hostile_image(local_base, tmp_path_factory.mktemp("hostile"))  # the SIF lane builds its own tag
    image = docker_engine.images.get(tag)
    image.tag(*AMD_NAMED.split(":"))
    yield {"tag": tag, "id": image.id, "client": docker_engine}
    docker_engine.images.remove(AMD_NAMED)


@pytest.fixture()
def host(tmp_path):
    """A host's secrets (a token variable, a token file) and a file the image must not reach."""
    hf = tmp_path / "hf"
    (hf / "hub").mkdir(parents=True)
    (hf / "token").write_text(FILE_TOKEN)
    victim = tmp_path / "victim.txt"
    victim.write_text(VICTIM_TEXT)
    env = {
        **os.environ,
        "HF_HOME": str(hf),
        "HF_TOKEN": TOKEN,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "SSH_AUTH_SOCK": str(tmp_path / "ssh-agent.sock"),
        "COLUMNS": "200",
    }
    return {"env": env, "victim": victim, "out": tmp_path / "run", "db": tmp_path / "m.db", "dir": tmp_path}


def _envbuild(host: dict, *args: str, timeout: float = 150) -> dict:
    ran = measured([ENVBUILD, "run", "workload", *args], env=host["env"], cwd=host["dir"], timeout=timeout)
    ran["text"] = ran["output"].decode("utf-8", "replace")
    print(
        f"\n[measured] {' '.join(args[:4])}: exit {ran['code']}, {ran['rss_mb']:.0f} MB peak RSS, {ran['seconds']:.1f} s"
    )
    return ran


def _left(hostile) -> list[dict]:
    """The containers of the hostile image, running or not (the engine's list: no inspect that a removal could race)."""
    return hostile["client"].api.containers(all=True, filters={"ancestor": hostile["id"]})


def _no_secret(text: str | bytes) -> None:
    data = text.encode() if isinstance(text, str) else text
    assert TOKEN.encode() not in data and FILE_TOKEN.encode() not in data


def test_a_lying_gpu_image_is_exit_2_sees_no_token_and_writes_no_host_file(hostile, host):
    out = host["out"]
    ran = _envbuild(
        host,
        *("--image", hostile["tag"], "--model", "google/gemma-2b", "--out", str(out), "--db", str(host["db"])),
        *("--", "--claim", "gpu", "--victim", str(host["victim"])),
    )
    assert ran["code"] == 2, ran["text"][-3000:]
    assert "gfx90a" in ran["text"] and "passed no GPU into the container" in ran["text"]
    assert host["victim"].read_text() == VICTIM_TEXT  # the links to it were never followed
    assert not (out / "result.json").exists() and not host["db"].exists()  # nothing written, nothing recorded
    log = read_file(out / "container.log", 1 << 20)  # envbuild's own regular file: the image could not replace it
    assert b"HOSTILE-ENV" in log and b"HOSTILE-FILE" not in log  # it looked, and found no token file
    assert b"SSH_AUTH_SOCK" not in log
    _no_secret(log), _no_secret(ran["output"])
    mounts = next(line for line in log.decode().splitlines() if line.startswith("HOSTILE-MOUNTS"))
    assert " /hf-cache/hub " in f"{mounts} " and " /hf-cache " not in f"{mounts} "  # the models, not the token
    esc = ran["output"].find(b"\x1b")
    assert esc < 0, ran["output"][max(esc - 200, 0) : esc + 100]
    assert "\\x1b]8;;https://evil.example/" in ran["text"]
    assert not _left(hostile)


def test_a_cpu_claim_is_recorded_as_a_cpu_measurement_under_its_own_name(hostile, host):
    """The same image under AMD's name (a local tag: no RepoDigest), given the token on purpose: the run is recorded
    as a CPU measurement of the build its probe named, the record says what the host checked, the label says the
    origin is unverified, and the token it printed is in no stored or published log."""
    out, db, site = host["out"], host["db"], host["dir"] / "site"
    ran = _envbuild(
        host,
        *("--image", AMD_NAMED, "--pass-hf-token", "--model", "google/gemma-2b", "--out", str(out), "--db", str(db)),
        *("--", "--claim", "cpu", "--victim", str(host["victim"])),
    )
    assert ran["code"] == 0, ran["text"][-3000:]
    assert "--pass-hf-token" in ran["text"] and "can read it" in ran["text"]
    assert host["victim"].read_text() == VICTIM_TEXT
    result = json.loads((out / "result.json").read_text())
    image = result["image"]
    assert image["vendor"] == f"{AMD_NAMED} (a local name: origin unverified)" and image["repo_digests"] == []
    assert image["checked"]["by_host"]["devices_passed"] == "none"
    assert image["checked"]["by_host"]["gpus_seen"] == {"amd": [], "nvidia": []}
    assert image["checked"]["by_host"]["digest"] == hostile["id"]
    assert "versions" in image["checked"]["from_image_only"]
    with sqlite3.connect(db) as conn:
        [(key, attempt)] = conn.execute(
            "SELECT cells.key, runs.attempt_dir FROM runs JOIN cells ON cells.id = runs.cell_id"
        ).fetchall()
    assert key == "cpu-torch2.4-py3.10"  # a CPU measurement of that build, never the GPU cell
    kept = db.parent / attempt
    assert not (kept / "third-party.log").exists()  # the link to /dev/zero was not followed
    for log in (out / "container.log", kept / "container.log"):
        text = read_file(log, 1 << 20).decode()
        assert f"HF_TOKEN={TOKEN}" not in text and "HF_TOKEN=[secret removed]" in text, text[-2000:]
        _no_secret(text)
    _no_secret(ran["output"])
    report = subprocess.run(
        [ENVBUILD, "report", "-o", str(site), "--db", str(db), "--no-recipes", "--no-results"],
        capture_output=True,
        env=host["env"],
        timeout=300,
    )
    assert report.returncode == 0, report.stderr[-2000:]
    pages = b"".join(p.read_bytes() for p in site.rglob("*") if p.is_file())
    _no_secret(pages)
    assert b"origin unverified" in pages and b"AMD image" not in pages
    page = (site / "cells" / "cpu-torch2.4-py3.10.html").read_text()
    assert "saw no GPU and passed none devices into the container" in page and "alone: versions, image.probe" in page
    assert not _left(hostile)


@pytest.mark.parametrize(
    ("python", "says"),
    [
        ("python3-huge", "more than 1048576 bytes"),
        ("python3-endless", "more than 1048576 bytes"),
        ("python3-hang", "did not answer within 5 s"),
        ("python3-escapes", "has no usable torch"),
    ],
)
def test_a_hostile_probe_is_exit_2_in_bounded_time_and_memory(hostile, host, python, says):
    ran = _envbuild(
        host,
        *("--image", hostile["tag"], "--python", python, "--probe-timeout", "5"),
        *("--out", str(host["out"]), "--db", str(host["db"])),
    )
    assert ran["code"] == 2, ran["text"][-3000:]
    assert says in ran["text"]
    assert ran["rss_mb"] < 400 and ran["seconds"] < 90
    assert b"\x1b" not in ran["output"]
    assert not host["out"].exists() and not host["db"].exists()
    assert not _left(hostile)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_probe_leaves_no_container(hostile, host, sig, code):
    proc = subprocess.Popen(
        [ENVBUILD, "run", "workload", "--image", hostile["tag"], "--python", "python3-hang", "--out", str(host["out"])],
        env=host["env"],
        cwd=host["dir"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while not [c for c in _left(hostile) if c["State"] == "running"] and time.monotonic() < deadline:
            time.sleep(0.2)
        [running] = _left(hostile)
        assert _engine_log(hostile, running) == "none"  # the engine keeps no copy of what the image prints
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=60)
    finally:
        _stop(proc)
    assert proc.returncode == code, output.decode()[-2000:]
    assert not _left(hostile)


def test_a_run_that_floods_its_log_is_stopped_at_the_cap(hostile, host):
    out = host["out"]
    ran = _envbuild(
        host,
        *("--image", hostile["tag"], "--out", str(out), "--db", str(host["db"]), "--", "--claim", "cpu", "--flood"),
    )
    assert ran["code"] == 1, ran["text"][-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["error_class"] == "output_limit", result["error"]
    assert len(read_file(out / "container.log", 65 << 20)) < (64 << 20) + 4096
    assert ran["rss_mb"] < 400
    assert not _left(hostile)


def test_a_run_stopped_by_sigterm_leaves_no_container(hostile, host):
    proc = subprocess.Popen(
        [ENVBUILD, "run", "workload", "--image", hostile["tag"], "--out", str(host["out"]), "--db", str(host["db"])]
        + ["--", "--claim", "cpu", "--hang"],
        env=host["env"],
        cwd=host["dir"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while b"HOSTILE-ESC" not in _log(host["out"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        [running] = _left(hostile)
        assert _engine_log(hostile, running) == "none"
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=90)
    finally:
        _stop(proc)
    assert proc.returncode == 143, output.decode()[-2000:]
    assert json.loads((host["out"] / "result.json").read_text())["error_class"] == "interrupted"
    assert not _left(hostile)


def _stop(proc: subprocess.Popen) -> None:
    """However the test ended: SIGTERM (envbuild removes its container), then SIGKILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _engine_log(hostile, container: dict) -> str:
    return hostile["client"].api.inspect_container(container["Id"])["HostConfig"]["LogConfig"]["Type"]


def _log(out: Path) -> bytes:
    try:
        return read_file(out / "container.log", 1 << 20)
    except (OSError, ValueError):
        return b""


@pytest.mark.parametrize("network", ["envbuild-no-such-network", "container:x", "a b"])
def test_an_unknown_network_is_exit_2_before_anything_is_written(hostile, host, network):
    ran = _envbuild(
        host, "--image", hostile["tag"], "--network", network, "--out", str(host["out"]), "--db", str(host["db"])
    )
    assert ran["code"] == 2, ran["text"][-2000:]
    assert "--network" in ran["text"]
    assert not host["out"].exists() and not host["db"].exists()
    assert not _left(hostile)
