"""Direct tests of guards that no other test would notice breaking: safe_slug, publish's
privacy filter, damaged status and manifest rows under `matrix list`, SIGTERM exit codes before a run or build
gets going, the local label in verify's torch check, the base image's digest in a cell's environment, and the
flaky window's limit."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.slug import safe_slug
from builder.store.store import MatrixStore
from builder.store.summary import FLAKY_WINDOW, summarize
from builder.plan.cells import Cell
from matrix_fixtures import cpu_result, failed_result, make_result
from tests.integration.test_verify_image import _failed, _host_expect
from verify_fixtures import run_verify

ENVBUILD = [sys.executable, "-c", "from builder.cli import main; main()"]
ROCM = Cell(flavor="rocm", accel_version="6.2", torch="2.4", arch="gfx90a", python="3.10")


@pytest.mark.parametrize("text", ["../../x", "/etc/passwd", "..", ".hidden", "a/b", "-rf", "x\x00y", ""])
def test_safe_slug_never_climbs_hides_or_stays_unsafe(text):
    slug = safe_slug(text)
    assert slug != text and "/" not in slug and not slug.startswith((".", "-")) and "\x00" not in slug
    assert all(c.isalnum() or c in "._+-" for c in slug) and len(slug) <= 80 + 11


def test_safe_slug_keeps_safe_text_and_never_merges_two_texts():
    assert safe_slug("cpu-torch2.13-py3.11") == "cpu-torch2.13-py3.11"
    assert safe_slug("a/b") != safe_slug("a_b") and safe_slug("a/b") != safe_slug("a:b")
    assert safe_slug("x" * 200) != safe_slug("x" * 201)


def test_publish_drops_the_host_name_and_kernel_command_line(tmp_path):
    result = cpu_result(
        host={
            "hostname": "secret-host-21",
            "kernel_cmdline": "root=/dev/sda1 secret=1",
            "os": "Debian 12",
            "kernel": "6.1.0",
            "gpus": [],
        }
    )
    source = tmp_path / "run" / "result.json"
    source.parent.mkdir()
    source.write_text(json.dumps(result))
    out = CliRunner().invoke(
        main,
        ["matrix", "publish", str(source), "--name", "local-21", "-o", str(tmp_path / "results")],
        catch_exceptions=False,
    )
    assert out.exit_code == 0, out.output
    published = (tmp_path / "results" / "cpu-torch2.13-py3.11" / "local-21" / "result.json").read_text()
    assert "secret-host-21" not in published and "secret=1" not in published
    host = json.loads(published)["host"]
    assert host == {"os": "Debian 12", "kernel": "6.1.0", "gpus": []}


def _list(db) -> CliRunner:
    return CliRunner().invoke(main, ["matrix", "list", "--json", "--db", str(db)], catch_exceptions=False)


def test_a_damaged_status_column_is_skipped_with_a_warning(tmp_path):
    db = tmp_path / "m.db"
    with MatrixStore.open(db) as store:
        store.record_run(make_result(finished_at="2026-12-02T10:00:00Z"))
        damaged = store.record_run(failed_result(finished_at="2026-12-02T11:00:00Z"))
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA ignore_check_constraints = ON")  # what byte damage can leave: no such status
    conn.execute("UPDATE runs SET status = 'p\u00e4ss' WHERE id = ?", (damaged.row_id,))
    conn.commit()
    conn.close()
    listed = _list(db)
    (line,) = json.loads(listed.stdout)
    assert (line["status"], line["runs"], line["flaky"]) == ("pass", 1, False)  # the damaged fail is not read
    assert f"skipped runs row {damaged.row_id}" in listed.stderr and "status" in listed.stderr


def test_a_damaged_build_manifest_is_skipped_with_a_warning(tmp_path):
    db = tmp_path / "m.db"
    manifest = {"cell": ROCM.model_dump(), "base_image": "rocm/dev-ubuntu-22.04:6.2", "context_hash": "c" * 64}
    with MatrixStore.open(db) as store:
        build = store.record_build(
            ROCM,
            status="fail",
            failure_class="compile_error",
            error="hipcc",
            manifest=manifest,
            context_hash="c" * 64,
            created_at="2026-12-02T09:00:00Z",
        )
    conn = sqlite3.connect(db)
    conn.execute("UPDATE builds SET manifest_json = CAST(x'ff7b226365' AS TEXT) WHERE id = ?", (build,))
    conn.commit()
    conn.close()
    listed = _list(db)
    (line,) = json.loads(listed.stdout)
    assert (line["status"], line["failure_class"], line["builds"]) == ("fail", "build:compile_error", 1)
    assert f"skipped builds row {build}" in listed.stderr and "manifest_json" in listed.stderr


class _SilentEngine:
    """A Unix socket that accepts connections and never answers: an engine that hangs."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(16)
        self.held = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        for conn in self.held:
            conn.close()
        self.sock.close()


@pytest.mark.parametrize(
    "command, message",
    [
        (
            ["run", "workload", "--image", "envbuild/x:21", "--out", "OUT", "--db", "DB"],
            "run interrupted (SIGTERM) before the workload started",
        ),
        (
            ["image", "--context", "CTX", "--tag", "envbuild-test/guards:21", "--db", "DB"],
            "build interrupted (SIGTERM); nothing was tagged",
        ),
    ],
    ids=["run-before-the-workload", "build-before-the-engine-answers"],
)
def test_sigterm_before_anything_started_exits_143(tmp_path, command, message):
    engine = _SilentEngine(tmp_path / "engine.sock")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM scratch\n")
    (ctx / "manifest.json").write_text(
        json.dumps(
            {"cell": Cell(flavor="cpu", accel_version=None, torch="2.13", arch=None, python="3.11").model_dump()}
        )
    )
    args = [{"OUT": str(tmp_path / "out"), "DB": str(tmp_path / "m.db"), "CTX": str(ctx)}.get(a, a) for a in command]
    proc = subprocess.Popen(
        [*ENVBUILD, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/engine.sock"},
    )
    try:
        deadline = time.monotonic() + 60
        while not engine.held and time.monotonic() < deadline:  # it is waiting on the engine now
            time.sleep(0.1)
        assert engine.held, "the command never reached the engine"
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
    finally:
        proc.kill()
        engine.close()
    assert proc.returncode == 143, output
    assert message in " ".join(output.split())


def test_verify_requires_the_torch_local_label_exactly(tmp_path):
    installed = md.version("torch")
    other = installed.split("+")[0] if "+" in installed else f"{installed}+cpu"  # the same release, label toggled
    code, out, record = run_verify(tmp_path, _host_expect(torch={"version": other, "by_path": False}))
    assert code == 1 and "torch version" in _failed(record)
    assert f"expected {other}; metadata {installed}" in out


def _on_digest(digest: str, status: str, at: str, store) -> None:
    manifest = {"cell": ROCM.model_dump(), "base_image": "rocm/dev-ubuntu-22.04:6.2", "context_hash": "c" * 64}
    build = store.record_build(
        ROCM,
        status="pass",
        image_digest=f"sha256:{digest * 64}",
        manifest=manifest,
        context_hash="c" * 64,
        base_digest=f"sha256:{digest * 64}",
        created_at=at,
    )
    image = {"tag": "envbuild/x:1", "digest": f"sha256:{digest * 64}", "manifest": manifest}
    result = (
        make_result(image=image, finished_at=at) if status == "pass" else failed_result(image=image, finished_at=at)
    )
    store.record_run(result, build_id=build)


def test_the_base_image_digest_is_part_of_the_environment(tmp_path):
    """The same base reference and context, pulled at two digests: two environments, so no flip."""
    with MatrixStore.open(tmp_path / "m.db") as store:
        _on_digest("a", "pass", "2026-12-02T10:00:00Z", store)
        _on_digest("b", "fail", "2026-12-02T11:00:00Z", store)
        (summary,) = summarize(store)
    assert summary.environments == [
        "rocm/dev-ubuntu-22.04:6.2@aaaaaaaaaaaa ctx cccccccccccc",
        "rocm/dev-ubuntu-22.04:6.2@bbbbbbbbbbbb ctx cccccccccccc",
    ]
    assert (summary.status, summary.flips, summary.flaky) == ("fail", [], False)


@pytest.mark.parametrize("passes_after, flaky", [(FLAKY_WINDOW - 1, True), (FLAKY_WINDOW, False)])
def test_the_flaky_window_holds_the_last_ten_verdicts(tmp_path, passes_after, flaky):
    assert FLAKY_WINDOW == 10
    with MatrixStore.open(tmp_path / "m.db") as store:
        store.record_run(failed_result(finished_at="2026-12-02T09:00:00Z"))
        for i in range(passes_after):
            store.record_run(make_result(finished_at=f"2026-12-02T10:{i:02d}:00Z"))
        (summary,) = summarize(store)
    assert summary.status == "pass" and len(summary.flips) == 1 and summary.flaky is flaky
