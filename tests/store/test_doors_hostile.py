"""Hostile files at every door: a site recipe overlay, a SIF record, a result.json, a matrix file to merge, an
index page, the working folder of a command that fails. Each case runs the real CLI in a subprocess and must
end with exit 2, one message naming the file and what is wrong, no traceback, nothing written in the working
folder, a peak RSS under 300 MB (the child's own, from wait4) and under 30 s."""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from builder.strict_json import MAX_RESULT_BYTES
from matrix_fixtures import make_result
from repo import REPO_ROOT

PEAK_MB = 300
SECONDS = 30
PACKAGED = (REPO_ROOT / "recipes" / "rocm.toml").read_text()


#: Runs the command and prints its peak RSS last on stderr. A small process forks it: a child's ru_maxrss
#: starts from its parent's RSS at fork, so forking from the test process would count the test's own memory.
_MEASURE = (
    "import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:]); _, status, usage = os.wait4(p.pid, 0);"
    " sys.stderr.write(f'\\nPEAK_KB={usage.ru_maxrss}\\n'); sys.exit(os.waitstatus_to_exitcode(status))"
)


def door(*args, cwd: Path, env: dict | None = None, seconds: float = SECONDS) -> tuple[int, str, float, float]:
    """(exit code, stderr, peak RSS in MB, seconds) of `envbuild ARGS` run in `cwd`."""
    environment = {k: v for k, v in os.environ.items() if k not in ("ENVBUILD_RECIPES", "ENVBUILD_DB")}
    environment.update({"PYTHONPATH": str(REPO_ROOT), **(env or {})})
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", _MEASURE, sys.executable, "-m", "builder", *map(str, args)],
        cwd=cwd,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _, raw = proc.communicate(timeout=seconds + 30)  # a hang fails the test instead of stopping the suite
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"envbuild {args} still running after {seconds + 30} s")
    stderr, _, peak = raw.decode("utf-8", "replace").rpartition("\nPEAK_KB=")
    seconds_taken = time.monotonic() - started
    print(
        f"\n[measured] {' '.join(map(str, args[:3]))}: exit {proc.returncode}, {int(peak) / 1024:.0f} MB, {seconds_taken:.1f} s"
    )
    return proc.returncode, stderr, int(peak) / 1024, seconds_taken


def tree(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")}


def refused(args, cwd: Path, *names: str, env: dict | None = None) -> str:
    """Run a hostile case and check everything the doors promise; return the message."""
    before = tree(cwd)
    code, stderr, peak, took = door(*args, cwd=cwd, env=env)
    assert code == 2, stderr
    assert "Traceback" not in stderr, stderr
    for name in names:
        assert name in stderr, (name, stderr)
    assert peak < PEAK_MB, f"peak RSS {peak:.0f} MB"
    assert took < SECONDS, f"{took:.1f} s"
    assert tree(cwd) == before, sorted(tree(cwd) - before)
    return stderr


def _release_block(version: str = "6.2") -> str:
    start = PACKAGED.index(f'[release."{version}"]')
    end = PACKAGED.find("\n[", start + 1)
    return PACKAGED[start:end].strip() + "\n"


def _overlay(tmp_path: Path, text: str) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    (site / "rocm.toml").write_text(text)
    return site


RENDER = ["render", "--rocm", "6.2.9", "--torch", "2.5", "--arch", "gfx90a", "-o", "ctx"]
SETUP = "rocm/dev-ubuntu-22.04:6.2\\n%setup\\n    touch /tmp/envbuild-pwned\\n%post"
OVERLAYS = {
    "a line end in base_image": (
        _release_block()
        .replace('[release."6.2"]', '[release."6.2.9"]')
        .replace('base_image = "rocm/dev-ubuntu-22.04:6.2"', f'base_image = "{SETUP}"'),
        ["base_image", "image reference"],
    ),
    "an array 100,000 deep": ("x = " + "[" * 100_000 + "]" * 100_000 + "\n", ["nested 100000 deep"]),
    "an array 100,000 deep between comments holding '''": (
        "# '''\nx = " + "[" * 100_000 + "]" * 100_000 + "\n# '''\n",
        ["nested 100000 deep"],
    ),
    "a dotted key of 10,000 parts": (".".join(["a"] * 10_000) + " = 1\n", ["dotted key"]),
    "a dotted key of 100,000 parts": (".".join(["a"] * 100_000) + " = 1\n", ["dotted key"]),
    "a release key ../..": (
        _release_block().replace('[release."6.2"]', '[release."../.."]'),
        ["'../..' is not a release name"],
    ),
}


@pytest.mark.parametrize("case", OVERLAYS)
def test_a_hostile_site_overlay_is_refused_before_anything_is_rendered(tmp_path, case):
    text, words = OVERLAYS[case]
    site = _overlay(tmp_path, text)
    work = tmp_path / "work"
    work.mkdir()
    refused(["--recipes", site, *RENDER], work, "rocm.toml", *words)
    refused(["recipes", "list"], work, "rocm.toml", *words, env={"ENVBUILD_RECIPES": str(site)})


FLAVORS = (REPO_ROOT / "recipes" / "flavors.toml").read_text()
ROCM_FLAVOR = FLAVORS[FLAVORS.index("[flavor.rocm]") : FLAVORS.index("[flavor.cpu]")]
PIP_RELEASE = PACKAGED[PACKAGED.index('[release."7.14"]') : PACKAGED.index('[release."10.0"]')]
SHA = "d44533f9d073df13895333e70b66f81c513c1889"


def _flavor(field: str, value: str) -> str:
    """The packaged [flavor.rocm] with `field` set to `value`, as a site would copy and edit it."""
    text, count = re.subn(rf"(?m)^{field} = .*$", f"{field} = {json.dumps(value)}", ROCM_FLAVOR)
    assert count == 1
    return text


def _build(**fields: str) -> str:
    """A [[build]] entry of source-builds.toml (a peer-proven source build of torch 2.4 on ROCm 6.2)."""
    entry = {
        "flavor": "rocm",
        "release": "6.2",
        "torch": "2.4",
        "repo": "https://github.com/pytorch/pytorch.git",
        "ref": "v2.4.1",
        "commit": SHA,
        "version": "2.4.1",
        "peer": "https://github.com/ROCm/pytorch/actions",
        "checked": "site",
        **fields,
    }
    return "[[build]]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in entry.items())


WHEEL = ["render", "--rocm", "6.2", "--torch", "2.5", "--arch", "gfx90a", "-o", "ctx"]
SOURCE = ["render", "--rocm", "6.2", "--torch", "2.4", "--arch", "gfx90a", "--torch-source", "source", "-o", "ctx"]
ARCHS = [f"gfx{n:x}" for n in range(0x900, 0x900 + 300)]
#: case -> (file, text, words the message holds, the render that would use the value)
SITE_FILES = {
    "a placeholder no field defines": ("flavors.toml", _flavor("local_version", "{nope}"), ["{suffix}"], WHEEL),
    "a format width of 60,000,000": ("flavors.toml", _flavor("local_version", "{suffix:>60000000}"), [], WHEEL),
    "attribute access": ("flavors.toml", _flavor("local_version", "{suffix.__class__.__mro__}"), [], WHEEL),
    "a width in the wheel index": (
        "flavors.toml",
        _flavor("wheel_index", "https://x.org/{suffix:>9999999}"),
        [],
        WHEEL,
    ),
    "attribute access in the source label": (
        "flavors.toml",
        _flavor("source_local_version", "rocm{version.__class__}"),
        ["{version}"],
        SOURCE,
    ),
    "a requirement's attribute access": (
        "rocm.toml",
        PIP_RELEASE.replace("device-{arch}]==7.14.0", "device-{arch.__class__}]==7.14.0"),
        ["{arch}, {torch}"],
        ["render", "--rocm", "7.14", "--torch", "2.14", "--arch", "gfx942", "-o", "ctx"],
    ),
    "a javascript: wheel index": (
        "flavors.toml",
        _flavor("wheel_index", "javascript:alert(document.cookie)//{suffix}"),
        ["is not an https:// URL"],
        WHEEL,
    ),
    "an http wheel index": (
        "flavors.toml",
        _flavor("wheel_index", "http://download.pytorch.org/whl/{suffix}"),
        ["is not an https:// URL"],
        WHEEL,
    ),
    "a user part in the wheel index": (
        "flavors.toml",
        _flavor("wheel_index", "https://download.pytorch.org@evil.example/{suffix}"),
        ["is not an https:// URL"],
        WHEEL,
    ),
    "a terminal hyperlink in a build's repo": (
        "source-builds.toml",
        _build(repo="https://github.com/pytorch/pytorch.git\x1b]8;;https://evil.example/\x07x\x1b]8;;\x07"),
        ["repo", "is not an https:// URL"],
        SOURCE,
    ),
    "a clear-screen in a build's peer": (
        "source-builds.toml",
        _build(peer="https://github.com/x\x1b[2J"),
        ["peer", "is not an https:// URL"],
        SOURCE,
    ),
    "a commit with a trailing line end": (
        "source-builds.toml",
        _build(commit=SHA + "\n"),
        ["commit must be a full 40-hex sha"],
        SOURCE,
    ),
    "a release of 300 archs: more than 4,096 cells": (
        "rocm.toml",
        re.sub(r"(?m)^archs = .*$", f"archs = {json.dumps(ARCHS)}", _release_block()).replace(
            '[release."6.2"]', '[release."6.2.9"]'
        ),
        ["more than 4096 cells"],
        ["render", "--rocm", "6.2.9", "--torch", "2.5", "--arch", "gfx90a", "-o", "ctx"],
    ),
}


@pytest.mark.parametrize("case", SITE_FILES)
def test_a_hostile_site_value_is_refused_when_the_recipes_load(tmp_path, case):
    """Overlay values that reached str.format, a link or a terminal: refused where the recipes load, with the
    file and the field named, before any command renders, lists or reports."""
    name, text, words, render = SITE_FILES[case]
    site = tmp_path / "site"
    site.mkdir()
    (site / name).write_text(text)
    work = tmp_path / "work"
    work.mkdir()
    for args in (render, ["recipes", "list"], ["report", "-o", "site-out"]):
        message = refused(["--recipes", site, *args], work, name, *words)
        assert "recipe data is invalid" in message and "\x1b" not in message and "\x07" not in message


def test_a_fifo_or_a_link_in_the_overlay_is_refused(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    os.mkfifo(site / "rocm.toml")
    work = tmp_path / "work"
    work.mkdir()
    refused(["--recipes", site, "recipes", "list"], work, "rocm.toml", "not a regular file")


def test_an_oversized_overlay_file_is_refused_before_it_is_read(tmp_path):
    site = tmp_path / "site"
    (site / "patches").mkdir(parents=True)
    with open(site / "patches" / "huge.patch", "wb") as handle:
        handle.truncate(1 << 30)  # sparse: 1 GiB that costs no disk
    work = tmp_path / "work"
    work.mkdir()
    refused(["--recipes", site, "recipes", "list"], work, "huge.patch", "larger than")


SIDECARS = {
    "nested 100,000 deep": lambda side: side.write_text("[" * 100_000 + "]" * 100_000),
    "a link to /dev/zero": lambda side: side.symlink_to("/dev/zero"),
    "a FIFO": lambda side: os.mkfifo(side),
    "1 GiB": lambda side: open(side, "wb").truncate(1 << 30),
}


@pytest.mark.parametrize("case", SIDECARS)
@pytest.mark.parametrize("command", ["run workload", "slurm submit"])
def test_a_hostile_sif_record_is_refused(tmp_path, case, command):
    work = tmp_path / "work"
    work.mkdir()
    sif = tmp_path / "cell.sif"
    sif.write_bytes(b"SIF")
    SIDECARS[case](tmp_path / "cell.sif.json")
    results = tmp_path / "results"
    results.mkdir()
    args = (
        ["run", "workload", "--apptainer", sif]
        if command == "run workload"
        else ["slurm", "submit", "--sif", sif, "--results-dir", results]
    )
    refused(args, work, "cell.sif.json", "not a readable SIF record")
    assert not any(results.iterdir())


def _empty_arrays(path: Path, size: int) -> None:
    count = (size - 2) // 3
    with open(path, "wb") as handle:
        handle.write(b"[" + b"[]," * (count - 1) + b"[]]")


@pytest.mark.parametrize("skip", [[], ["--skip-invalid"]])
def test_a_result_of_empty_arrays_just_under_the_cap_is_refused_in_little_memory(tmp_path, skip):
    work = tmp_path / "work"
    work.mkdir()
    _empty_arrays(work / "result.json", (64 << 20) - 64)
    message = refused(["matrix", "import", *skip, "result.json"], work, "result.json", "more than 1000000 JSON values")
    assert "nothing imported: every file is invalid" in message or not skip


def _result_of_size(path: Path, size: int) -> None:
    """A result.json of exactly `size` bytes: a valid result whose `error` text fills it (one long JSON string,
    the shape whose scan once cost about 117 bytes per character)."""
    result = make_result(error="")
    filler = size - len(json.dumps(result).encode())
    result["error"] = "x" * filler
    path.write_text(json.dumps(result))
    assert path.stat().st_size == size


JSON_DOORS = {
    "matrix import": ["matrix", "import", "--db", "m.db", "result.json"],
    "matrix publish": ["matrix", "publish", "result.json", "--name", "x", "--out", "OUT"],
}


@pytest.mark.parametrize("command", JSON_DOORS)
def test_a_result_json_at_the_size_cap_costs_about_three_times_its_size_in_memory(tmp_path, command):
    """Three copies are the parser's own (the bytes, the decoded text, the parsed string); the scan before the
    parser adds none. Measured as the child's peak RSS over the same command's peak on a 5 KB result."""
    peaks = []
    for name, size in (("small", None), ("big", MAX_RESULT_BYTES)):
        work = tmp_path / name
        work.mkdir()
        if size:
            _result_of_size(work / "result.json", size)
        else:
            (work / "result.json").write_text(json.dumps(make_result(error="x" * 5000)))
        before = tree(work)
        code, stderr, peak, _ = door(*JSON_DOORS[command], cwd=work, seconds=60)
        assert code == 2 and "Traceback" not in stderr, stderr
        assert "error: string longer than 4096 characters" in stderr, stderr
        assert tree(work) == before
        peaks.append(peak)
    growth = (peaks[1] - peaks[0]) * (1 << 20)
    assert growth < 3.1 * MAX_RESULT_BYTES, f"peak {peaks[1]:.0f} MB at the cap, {peaks[0]:.0f} MB for 5 KB"


def test_a_sparse_2_gib_matrix_file_is_refused_before_it_is_copied(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    with open(work / "ci.db", "wb") as handle:
        handle.truncate(2 << 30)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    refused(["matrix", "import", "ci.db"], work, "ci.db", "larger than", env={"TMPDIR": str(scratch)})
    assert not any(scratch.iterdir())


class _Hostile(http.server.BaseHTTPRequestHandler):
    """`/marked/`: a page html.parser cannot read; `/slow/`: one byte every 2 s, forever."""

    def log_message(self, format, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        if self.path.startswith("/marked/"):
            self.wfile.write(b"<html><body><a href='torch/'>torch</a><![ x ]]></body></html>")
            return
        try:
            for _ in range(60):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(2)
        except OSError:
            pass


@pytest.fixture
def hostile_index():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_page_the_parser_cannot_read_is_exit_2_naming_its_url(tmp_path, hostile_index):
    message = refused(
        ["recipes", "check-upstream", "--index", f"{hostile_index}/marked/"],
        tmp_path,
        f"{hostile_index}/marked/",
        "not an HTML index page",
    )
    assert "missing" not in message


def test_a_server_that_sends_one_byte_at_a_time_meets_one_deadline_per_index(tmp_path, hostile_index):
    started = time.monotonic()
    refused(
        ["recipes", "check-upstream", "--timeout", "5", "--index", f"{hostile_index}/slow/"],
        tmp_path,
        f"{hostile_index}/slow/",
        "not read within the time allowed",
    )
    assert time.monotonic() - started < 15


def test_image_without_an_engine_leaves_the_working_folder_as_found(tmp_path):
    refused(
        ["image", "--rocm", "6.2", "--torch", "2.5", "--arch", "gfx90a"],
        tmp_path,
        "no Docker engine",
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"},
    )


def test_publish_with_a_missing_key_leaves_no_cell_folder(tmp_path):
    result = next((REPO_ROOT / "results").rglob("result.json"))
    refused(
        [
            "matrix",
            "publish",
            result,
            "--name",
            "x",
            "--out",
            "OUT",
            "--sign",
            tmp_path / "missing",
            "--command",
            "envbuild run workload",
        ],
        tmp_path,
        "missing",
        "no such key file",
    )


def test_every_door_reads_through_the_bounded_reader():
    """The modules that read a file from outside call builder.bounded_read (directly or by strict_json),
    and none of them reads such a file another way."""
    doors = {
        "builder/strict_json.py": "bounded_read.read_file",  # result.json, attestations, slurm collect
        "builder/engine/apptainer.py": "strict_json.read_regular(side",  # SIF records
        "builder/plan/recipe_overlay.py": "bounded_read.read_file",  # overlay TOML and files
        "builder/store/store_reads.py": "bounded_read.copy_file",  # .db files to merge
        "builder/plan/upstream.py": "bounded_read.read_url",  # index pages
        "builder/workflows/import_results.py": "strict_json.read_regular(file",  # import and the report
        "builder/workflows/publish.py": "strict_json.read_regular(request.file",
        "builder/workflows/run_result.py": "strict_json.read_regular(path",
        "builder/workflows/slurm_collect.py": "strict_json.read_regular(path",
        "builder/attest/signing.py": "strict_json.read_regular(",
    }
    for module, call in doors.items():
        text = (REPO_ROOT / module).read_text()
        assert call in text, (module, call)
        assert not re.search(r"json\.loads?\([^)]*read_(text|bytes)\(", text), module
    overlay = (REPO_ROOT / "builder/plan/recipe_overlay.py").read_text()
    assert "shutil.copyfile" not in overlay and "read_text(encoding" not in overlay


def _fifo_at(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


FIFO_DOORS = {
    "matrix import result.json": lambda t: (["matrix", "import", _fifo_at(t, "in/result.json")], "result.json"),
    "matrix import .db": lambda t: (["matrix", "import", _fifo_at(t, "in/ci.db")], "ci.db"),
    "matrix verify": lambda t: (["matrix", "verify", _fifo_at(t, "in/result.json")], "result.json"),
    "matrix publish": lambda t: (
        ["matrix", "publish", _fifo_at(t, "in/result.json"), "--name", "x", "--out", "OUT"],
        "result.json",
    ),
    "check-upstream index": lambda t: (
        ["recipes", "check-upstream", "--index", _fifo_at(t, "idx/index.html").parent],
        "index.html",
    ),
    "check-upstream releases": lambda t: (
        ["recipes", "check-upstream", "--releases", _fifo_at(t, "tags.txt")],
        "tags.txt",
    ),
    "check-upstream file:// releases": lambda t: (
        ["recipes", "check-upstream", "--releases", _fifo_at(t, "tags.txt").as_uri()],
        "tags.txt",
    ),
}


@pytest.mark.parametrize("case", FIFO_DOORS)
def test_a_fifo_at_every_door_is_refused_at_once(tmp_path, case):
    work = tmp_path / "work"
    work.mkdir()
    args, name = FIFO_DOORS[case](tmp_path)
    refused(args, work, name, "not a regular file")
