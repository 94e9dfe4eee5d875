"""`envbuild run workload --image` with real containers: mounts, result collection, faults, cleanup."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.engine.container import RunError, device_options
from builder.engine.doctor import HostView
from builder.store.store import MatrixStore
from tests.run_fixtures import build_fake_workload_image, fake_mode
from tests.engine.test_doctor import fake_gpu_host

pytestmark = pytest.mark.docker
FAKE_CELL = "cpu-torch2.13-py3.11"
ENVBUILD = [sys.executable, "-c", "from builder.cli import main; main()"]


@pytest.fixture(scope="module")
def fake_image(tools_image, tmp_path_factory) -> str:
    return build_fake_workload_image(tools_image, tmp_path_factory.mktemp("fake"))


def run_cli(*args: str, env: dict | None = None):
    return CliRunner(env=env).invoke(main, ["run", "workload", *args])


def leftover_containers(engine) -> list:
    return engine.containers.list(all=True, filters={"label": "org.envbuild.run"})


def result_of(out: Path) -> dict:
    return json.loads((out / "result.json").read_text())


def test_pass_collects_result_with_host_and_image(tmp_path, fake_image, docker_engine):
    model, data = tmp_path / "model", tmp_path / "data"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data.mkdir()
    (data / "emotions.jsonl").write_text("{}\n")
    out, db = tmp_path / "out", tmp_path / "matrix.db"
    token = "hf_secret_token_value_123"
    result = run_cli(
        "--image",
        fake_image,
        "--preset",
        "pass",
        "--model",
        str(model),
        "--data",
        str(data),
        "--out",
        str(out),
        "--db",
        str(db),
        "--",
        "--max-steps",
        "3",
        env={"HF_TOKEN": token},
    )
    assert result.exit_code == 0, result.output
    assert token not in result.output
    record = result_of(out)
    assert record["status"] == "pass"
    seen = record["seen"]
    assert seen["args"][:4] == ["train", "--preset", "pass", "--out"] and seen["args"][-2:] == ["--max-steps", "3"]
    assert seen["hf_token"] == token
    assert seen["model_writable"] is False and seen["data_writable"] is False  # read-only mounts
    assert seen["data_listing"] == ["emotions.jsonl"]
    assert {c["name"] for c in record["host"]["checks"]} >= {"kernel", "docker_engine", "buildkit"}
    image = docker_engine.images.get(fake_image)
    assert record["image"]["tag"] == fake_image and record["image"]["digest"] == image.id
    assert record["image"]["manifest"]["cell"]["flavor"] == "cpu"
    assert (out / "container.log").read_text().startswith("fake workload: pass")
    assert leftover_containers(docker_engine) == []
    with MatrixStore.open(db) as store:
        runs = store.runs()
    assert [r["result"]["run_id"] for r in runs] == [record["run_id"]]


def matrix_list(db: Path) -> dict:
    """`envbuild matrix list --json` of `db`, by cell key."""
    listed = CliRunner().invoke(main, ["matrix", "list", "--json", "--db", str(db)])
    assert listed.exit_code == 0, listed.output
    return {line["key"]: line for line in json.loads(listed.output)}


@pytest.mark.parametrize(
    "mode, error_class",
    [("die", "container_died"), ("pass-then-crash", "container_died"), ("garbage", "invalid_result")],
)
def test_faults_never_record_pass(tmp_path, fake_image, docker_engine, mode, error_class):
    out, db = fake_mode(tmp_path / "out", mode), tmp_path / "m.db"
    ok = fake_mode(tmp_path / "ok", "pass")
    assert run_cli("--image", fake_image, "--out", str(ok), "--db", str(db)).exit_code == 0
    result = run_cli("--image", fake_image, "--out", str(out), "--db", str(db))
    assert result.exit_code == 1, result.output
    record = result_of(out)
    assert record["status"] == "error" and record["error_class"] == error_class
    assert record["host"] and record["image"]["tag"] == fake_image
    assert leftover_containers(docker_engine) == []
    if mode == "garbage":
        assert (out / "result.invalid.json").read_text().startswith('{"schema_version": 1')
    cell = matrix_list(db)[FAKE_CELL]  # a crash in the environment is a verdict: the pass flips to fail
    assert (cell["status"], cell["failure_class"], cell["runs"], cell["attempts"], cell["flaky"]) == (
        "fail",
        error_class,
        2,
        0,
        True,
    )


def test_bad_input_refused_by_the_workload_is_exit_2_and_not_recorded(tmp_path, fake_image, docker_engine):
    out, db = tmp_path / "out", tmp_path / "matrix.db"
    result = run_cli("--image", fake_image, "--preset", "bad-input", "--out", str(out), "--db", str(db))
    assert result.exit_code == 2, result.output
    assert "/data/d.jsonl:3: not valid JSON" in result.output and "nothing recorded" in result.output
    assert not (out / "result.json").exists() and not db.exists()
    assert leftover_containers(docker_engine) == []


def start_sleeper(fake_image: str, out: Path, engine, db: Path) -> subprocess.Popen:
    """`envbuild run workload` (recording into `db`) in a subprocess whose container sleeps; returns once it sleeps."""
    proc = subprocess.Popen(
        [*ENVBUILD, "run", "workload", "--image", fake_image, "--out", str(fake_mode(out, "sleep")), "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log, deadline = out / "container.log", time.monotonic() + 60
    while time.monotonic() < deadline and not (log.exists() and "sleeping" in log.read_text()):
        time.sleep(0.3)
    assert leftover_containers(engine), "the container never started"
    return proc


def test_container_killed_mid_run(tmp_path, fake_image, docker_engine):
    out, db = tmp_path / "out", tmp_path / "m.db"
    proc = start_sleeper(fake_image, out, docker_engine, db)
    leftover_containers(docker_engine)[0].kill()
    output, _ = proc.communicate(timeout=90)
    assert proc.returncode == 1, output
    record = result_of(out)
    assert record["status"] == "error" and record["error_class"] == "container_died"
    assert "137" in record["error"]
    assert leftover_containers(docker_engine) == []
    cell = matrix_list(db)[FAKE_CELL]
    assert (cell["status"], cell["failure_class"], cell["runs"], cell["attempts"]) == ("fail", "container_died", 1, 0)


@pytest.mark.parametrize("sig, code, how", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
def test_a_stopped_run_removes_the_container_and_is_no_verdict(tmp_path, fake_image, docker_engine, sig, code, how):
    out, db = tmp_path / "out", tmp_path / "m.db"
    proc = start_sleeper(fake_image, out, docker_engine, db)
    proc.send_signal(sig)
    output, _ = proc.communicate(timeout=90)
    assert proc.returncode == code, output
    assert f"run interrupted ({how})" in output
    assert f"# envbuild: interrupted ({how}); stopping the container" in (out / "container.log").read_text()
    record = result_of(out)
    assert record["status"] == "error" and record["error_class"] == "interrupted"
    assert leftover_containers(docker_engine) == []
    cell = matrix_list(db)[FAKE_CELL]
    assert (cell["status"], cell["runs"], cell["attempts"]) == ("untested", 0, 1)


def test_bad_input_is_rejected_before_any_container(tmp_path, fake_image, docker_engine):
    unknown = run_cli("--image", "envbuild-test/no-such-image:0", "--out", str(tmp_path / "a"))
    assert unknown.exit_code == 2 and "not found locally" in unknown.output
    missing_model = run_cli("--image", fake_image, "--model", str(tmp_path / "nope"), "--out", str(tmp_path / "b"))
    assert missing_model.exit_code == 2 and "no such file or directory" in missing_model.output
    missing_data = run_cli("--image", fake_image, "--data", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "c"))
    assert missing_data.exit_code == 2 and "--data" in missing_data.output
    gpus_on_cpu = run_cli("--image", fake_image, "--gpus", "all", "--out", str(tmp_path / "d"))
    assert gpus_on_cpu.exit_code == 2 and "cpu image" in gpus_on_cpu.output
    both = run_cli("--image", fake_image, "--local")
    assert both.exit_code == 2
    used = tmp_path / "used"
    used.mkdir()
    (used / "result.json").write_text("{}")
    reused = run_cli("--image", fake_image, "--out", str(used))
    assert reused.exit_code == 2 and "exists from an earlier run" in reused.output
    assert (used / "result.json").read_text() == "{}"
    assert leftover_containers(docker_engine) == []


def _make_unwritable(path: Path) -> None:
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
    elif subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root without chattr: no way to make a directory unwritable")


def test_unwritable_out_dir(tmp_path, fake_image):
    locked = tmp_path / "locked"
    _make_unwritable(locked)
    try:
        result = run_cli("--image", fake_image, "--out", str(locked))
        assert result.exit_code == 2 and "not writable" in result.output
    finally:
        subprocess.run(["chattr", "-i", str(locked)], capture_output=True)
        locked.chmod(0o755)


def test_no_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    monkeypatch.chdir(tmp_path)  # nothing may land in the checkout, not even the default matrix file
    result = run_cli("--image", "whatever:1", "--out", str(tmp_path / "out"), "--db", str(tmp_path / "m.db"))
    assert result.exit_code == 2 and "no Docker engine answers" in result.output and "--local" in result.output
    assert "systemctl start docker" in result.output and "start_docker.sh" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run dir, no matrix file: nothing ran


def test_rocm_device_flags_follow_the_selected_gpus(tmp_path):
    host = HostView(root=fake_gpu_host(tmp_path, gpus=(90010, 90010, 90010)), uid=0, groups=(0,))
    every = device_options("rocm", "all", host)
    root = str(host.root)
    assert every["devices"] == [f"{root}/dev/kfd:/dev/kfd:rwm", f"{root}/dev/dri:/dev/dri:rwm"]
    assert every["security_opt"] == ["seccomp=unconfined"] and every["ipc_mode"] == "host"
    assert "video" in every["group_add"] and str(os.getgid()) in every["group_add"]
    some = device_options("rocm", "0,2", host)
    assert some["devices"][1:] == [
        f"{root}/dev/dri/renderD128:/dev/dri/renderD128:rwm",
        f"{root}/dev/dri/renderD130:/dev/dri/renderD130:rwm",
    ]
    with pytest.raises(RunError, match="GPUs 0..2"):
        device_options("rocm", "5", host)
    cuda = device_options("cuda", "1", host)
    assert cuda["device_requests"][0]["DeviceIDs"] == ["1"]
    assert device_options("cpu", None, host) == {}
