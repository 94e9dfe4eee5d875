"""`envbuild sif IMAGE` (docker save -> apptainer build -> verify inside) without a Docker engine or Apptainer.

DOCKER_HOST points at a recorded engine: a socket server answering the Docker API calls the SDK makes with what
the real engine answered for the cpu cell's image (tests/recorded/docker/cpu-image-inspect.json, `docker image inspect`
of envbuild/cpu-torch2.13-py3.11 built in CI's phase 2) and a small archive for `docker save`. $ENVBUILD_APPTAINER
is a stand-in that records each call, the archive's and work folder's modes, builds a "SIF" from the archive and
answers the verify step. What is asserted is what a user and `run workload --apptainer` see: the exit code, the
messages, the SIF and its record. tests/integration/test_hpc.py builds the real SIF with the real engine and Apptainer."""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import socketserver
import stat
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from repo import REPO_ROOT

INSPECT = json.loads((REPO_ROOT / "tests" / "recorded" / "docker" / "cpu-image-inspect.json").read_text())
TAG = INSPECT["RepoTags"][0]
ARCHIVE = b"a docker save archive, as the recorded engine streams it\n" * 3000
STAND_IN = """#!/bin/bash
if [ "$1" = --version ]; then echo "apptainer version 1.4.5"; exit 0; fi
n=$(ls "$RECORD_DIR" | grep -c '^call')
printf '%s\\0' "$@" > "$RECORD_DIR/call$n"
case "$1" in
  build) sleep "${BUILD_SLEEP:-0}"; sif=${@: -2:1}; archive=${@: -1}; archive=${archive#docker-archive://}
         stat -c %a "$archive" > "$RECORD_DIR/archive.mode"
         stat -c %a "$(dirname "$archive")" > "$RECORD_DIR/work.mode"
         dirname "$(dirname "$archive")" > "$RECORD_DIR/work.parent"
         case "$BUILD_FAIL" in
           "") ;;
           stdout) echo "FATAL:   only on stdout"; exit 3 ;;
           signal) echo "killed" >&2; kill -9 $$ ;;
           long) head -c 1700 /dev/zero | tr '\\0' y >&2; echo " FATAL:   the end" >&2; exit 255 ;;
           *) echo "FATAL:   While performing build: packer failed to pack" >&2; exit 255 ;;
         esac
         { echo "SIF of"; cat "$archive"; } > "$sif" ;;
  exec)  sleep "${VERIFY_SLEEP:-0}"; for word in "$@"; do case "$word" in *:/out) out=${word%:/out} ;; esac; done
         echo "verify: 12 checks"
         printf '{"ok": %s, "checks": [%s]}' "${VERIFY_OK:-true}" "$(yes '{"name": "c"}' | head -12 | paste -sd,)" \\
           > "$out/verify.json"
         exit "${VERIFY_CODE:-0}" ;;
esac
"""


class _Engine(http.server.BaseHTTPRequestHandler):
    """The Docker API answers the SDK needs for `images.get` and `image.save`, as the real engine gave them."""

    protocol_version = "HTTP/1.1"
    seen: list[str]
    images: dict
    save_s: float = 0.0  # how long `docker save` takes

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Api-Version", "1.45")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append(self.path)
        path = re.sub(r"^/v[0-9.]+", "", self.path.split("?")[0])
        if path == "/_ping":
            return self._send(200, b"OK", "text/plain")
        if path == "/version":
            return self._send(200, json.dumps({"ApiVersion": "1.45", "Version": "20.10.24"}).encode())
        match = re.fullmatch(r"/images/(.+)/(json|get)", path)
        image = self.images.get(match[1]) if match else None
        if image is None:
            return self._send(404, json.dumps({"message": f"No such image: {match[1] if match else path}"}).encode())
        if match[2] == "json":
            return self._send(200, json.dumps(image).encode())
        time.sleep(self.save_s)
        return self._send(200, ARCHIVE, "application/x-tar")

    def do_HEAD(self) -> None:  # noqa: N802
        self._send(200, b"", "text/plain")


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        request, _ = super().get_request()
        return request, ("recorded-engine", 0)  # http.server logs a (host, port) pair


@pytest.fixture
def engine(tmp_path, monkeypatch):
    """The recorded engine on a socket under tmp_path as DOCKER_HOST; returns (requested paths, images by name)."""
    seen: list[str] = []
    images = {TAG: INSPECT, INSPECT["Id"]: INSPECT}
    handler = type("Engine", (_Engine,), {"seen": seen, "images": images, "save_s": 1.33})
    server = _Server(str(tmp_path / "docker.sock"), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'docker.sock'}")
    yield seen, images
    server.shutdown()
    server.server_close()


@pytest.fixture
def apptainer(tmp_path, monkeypatch) -> Path:
    record = tmp_path / "record"
    record.mkdir()
    binary = tmp_path / "bin" / "apptainer"
    binary.parent.mkdir()
    binary.write_text(STAND_IN)
    binary.chmod(0o755)
    monkeypatch.setenv("ENVBUILD_APPTAINER", str(binary))
    monkeypatch.setenv("RECORD_DIR", str(record))
    return record


def _calls(record: Path) -> list[list[str]]:
    return [
        (record / f"call{i}").read_bytes().decode().split("\0")[:-1] for i in range(len(list(record.glob("call*"))))
    ]


def _sif(out: Path, *args: str, image: str = TAG):
    return CliRunner().invoke(main, ["sif", image, "-o", str(out), *args], env={"COLUMNS": "300"})


def test_the_sif_of_an_image_names_it_its_plan_and_how_it_was_made(engine, apptainer, tmp_path, monkeypatch):
    seen, _ = engine
    folder = tmp_path / "sifs"
    folder.mkdir()
    folder.chmod(0o751)
    out = folder / "cpu.sif"
    monkeypatch.setenv("BUILD_SLEEP", "1.3")
    monkeypatch.setenv("VERIFY_SLEEP", "1.3")
    made = _sif(out)
    assert made.exit_code == 0, made.output
    assert made.stdout.strip() == str(out)
    labels = INSPECT["Config"]["Labels"]
    manifest = json.loads(labels["org.envbuild.manifest"])
    record = json.loads(out.with_name("cpu.sif.json").read_text())
    assert record["schema_version"] == 1 and record["sif"] == "cpu.sif" and record["route"] == "docker-archive"
    assert record["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert record["size_bytes"] == out.stat().st_size == len(b"SIF of\n" + ARCHIVE)
    assert record["context_hash"] == manifest["context_hash"] == labels["org.envbuild.context-hash"]
    assert record["image"] == {"tag": TAG, "id": INSPECT["Id"], "digest": INSPECT["Id"], "manifest": manifest}
    assert record["runtime"] == {
        "name": "apptainer",
        "version": "1.4.5",
        "version_line": "apptainer version 1.4.5",
        "path": str(tmp_path / "bin" / "apptainer"),
    }
    assert record["apptainer"] == "apptainer version 1.4.5"
    assert record["verify"]["ok"] is True and record["verify"]["checks"] == 12 and record["verify"]["exit_code"] == 0
    assert "verify: 12 checks" in record["verify"]["output_tail"]
    # each step's own seconds, to a tenth: save 1.33 s (the engine; rounded to hundredths it would show), build and
    # verify 1.3 s
    timings = record["timings"]
    assert set(timings) == {"docker_save_s", "apptainer_build_s", "verify_s"}
    assert all(1.3 <= t < 30 and t == round(t, 1) for t in timings.values()), timings
    assert f"verified inside the SIF (12 checks): {out} sha256 {record['sha256']}" in made.stderr
    assert "docker-archive route, apptainer version 1.4.5" in made.stderr
    # the archive was saved by its tag (`docker save` by name, so the archive says which image it holds), opened
    # to whoever apptainer runs as, in a work folder as open as the SIF's own, which is gone afterwards
    assert any(re.search(r"/images/envbuild/cpu-torch2\.13-py3\.11:[0-9a-f]+/get$", p.split("?")[0]) for p in seen)
    assert (apptainer / "archive.mode").read_text().strip() == "644"
    assert (apptainer / "work.mode").read_text().strip() == "751"
    assert (apptainer / "work.parent").read_text().strip() == str(folder)  # the archive lies beside the SIF
    assert stat.S_IMODE(out.with_name("cpu.sif.json").stat().st_mode) == 0o644
    assert sorted(p.name for p in folder.iterdir()) == ["cpu.sif", "cpu.sif.json"]
    build, verify = _calls(apptainer)
    assert build[:2] == ["build", "--force"] and build[-2].endswith("/cpu.sif") and build[-2] != str(out)
    assert build[-1].startswith("docker-archive://") and build[-1].endswith("/image.tar")
    assert verify[:5] == ["exec", "--cleanenv", "--containall", "--bind", verify[4]] and verify[4].endswith(":/out")
    assert verify[5:] == [
        build[-2],
        "python3",
        "/opt/envbuild/verify_image.py",
        "/opt/envbuild/expect.json",
        "/out/verify.json",
    ]


def test_a_chosen_compressor_reaches_mksquashfs(engine, apptainer, tmp_path):
    made = _sif(tmp_path / "cpu.sif", "--compression", "lz4")
    assert made.exit_code == 0, made.output
    build = _calls(apptainer)[0]
    assert build[2:4] == ["--mksquashfs-args", "-comp lz4"]


def test_a_failed_build_names_apptainer_and_its_message_and_leaves_nothing(engine, apptainer, tmp_path, monkeypatch):
    monkeypatch.setenv("BUILD_FAIL", "1")
    made = _sif(tmp_path / "cpu.sif")
    assert made.exit_code == 2, made.output
    assert (
        "apptainer build failed (exit code 255): FATAL:   While performing build: packer failed to pack" in made.output
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "docker.sock", "record"]


def test_a_sif_whose_verify_step_fails_is_kept_with_the_failure(engine, apptainer, tmp_path, monkeypatch):
    monkeypatch.setenv("VERIFY_OK", "false")
    monkeypatch.setenv("VERIFY_CODE", "1")
    out = tmp_path / "cpu.sif"
    made = _sif(out)
    assert made.exit_code == 1, made.output
    assert "the image's verify step failed inside the SIF (exit code 1)" in made.stderr
    record = json.loads(out.with_name("cpu.sif.json").read_text())
    assert record["verify"]["ok"] is False and record["verify"]["exit_code"] == 1 and out.is_file()


def test_an_image_built_when_the_hash_label_had_its_legacy_name_still_names_its_hash(engine, apptainer, tmp_path):
    """An image whose labels name the content hash only by the legacy name (org.envbuild.context-hash), and whose
    manifest label does not carry it: the SIF record still names it."""
    _, images = engine
    labels = dict(INSPECT["Config"]["Labels"])
    assert labels.pop("io.envbuild.context-hash") == labels["org.envbuild.context-hash"]
    manifest = json.loads(labels["org.envbuild.manifest"])
    del manifest["context_hash"]
    labels["org.envbuild.manifest"] = json.dumps(manifest)
    images["envbuild/cpu:legacy"] = dict(
        INSPECT, Config=dict(INSPECT["Config"], Labels=labels), RepoTags=["envbuild/cpu:legacy"]
    )
    out = tmp_path / "legacy.sif"
    made = _sif(out, image="envbuild/cpu:legacy")
    assert made.exit_code == 0, made.output
    record = json.loads(out.with_name("legacy.sif.json").read_text())
    assert record["context_hash"] == labels["org.envbuild.context-hash"]


def test_an_unknown_image_or_one_without_a_manifest_is_bad_input(engine, apptainer, tmp_path):
    _, images = engine
    unknown = _sif(tmp_path / "a.sif", image="envbuild/cpu:nothing")
    assert unknown.exit_code == 2 and "image envbuild/cpu:nothing not found locally" in unknown.output
    bare = dict(INSPECT, Config=dict(INSPECT["Config"], Labels={}), RepoTags=["envbuild-local/debian:bookworm"])
    images["envbuild-local/debian:bookworm"] = bare
    plain = _sif(tmp_path / "b.sif", image="envbuild-local/debian:bookworm")
    assert plain.exit_code == 2 and "has no envbuild manifest label" in plain.output
    assert _calls(apptainer) == [] and not list(tmp_path.glob("*.sif*"))


def test_a_failed_build_shows_the_last_1500_characters_of_what_apptainer_said(engine, apptainer, tmp_path, monkeypatch):
    monkeypatch.setenv("BUILD_FAIL", "long")
    made = _sif(tmp_path / "cpu.sif")
    assert made.exit_code == 2, made.output
    said = ("y" * 1700 + " FATAL:   the end")[-1500:]
    assert f"apptainer build failed (exit code 255): {said}" in "".join(made.output.split("\n"))
    assert "y" * 1501 not in "".join(made.output.split("\n"))
    monkeypatch.setenv("BUILD_FAIL", "stdout")  # nothing on stderr: what it printed on stdout is the message
    made = _sif(tmp_path / "cpu.sif")
    assert made.exit_code == 2 and "apptainer build failed (exit code 3): FATAL:   only on stdout" in made.output


def test_a_build_killed_by_a_signal_failed(engine, apptainer, tmp_path, monkeypatch):
    monkeypatch.setenv("BUILD_FAIL", "signal")
    made = _sif(tmp_path / "cpu.sif")
    assert made.exit_code == 2 and "apptainer build failed (exit code -9): killed" in made.output, made.output
    assert not (tmp_path / "cpu.sif").exists()


def test_a_sif_goes_into_folders_made_for_it(engine, apptainer, tmp_path):
    out = tmp_path / "new" / "deeper" / "cpu.sif"
    made = _sif(out)
    assert made.exit_code == 0, made.output
    assert out.is_file() and out.with_name("cpu.sif.json").is_file()
