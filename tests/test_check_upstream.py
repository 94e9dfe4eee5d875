"""`envbuild recipes check-upstream` against a PEP 503 index this test builds and serves over HTTP."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main

TORCH_FILES = [
    "torch-2.11.0+rocm7.2-cp312-cp312-manylinux_2_28_x86_64.whl",   # in the recipes: nothing to report
    "torch-2.11.0%2Brocm7.2-cp313-cp313-manylinux_2_28_x86_64.whl",  # same wheel, another Python, URL-quoted
    "torch-2.15.0+rocm7.2-cp312-cp312-manylinux_2_28_x86_64.whl",   # a line the recipes lack
    "torch-2.9.2+rocm6.4-cp310-cp310-manylinux_2_28_x86_64.whl",    # newer than the 2.9 line's pin (2.9.1)
    "torch-2.8.0+rocm6.3-cp310-cp310-manylinux_2_28_x86_64.whl",    # pinned version, index suffix not listed
    "torch-2.9.0+rocm6.4-cp310-cp310-manylinux_2_28_x86_64.whl",    # older than the pin: not news
    "torch-2.13.0-cp311-none-macosx_11_0_arm64.whl",                # not a ROCm Linux wheel: ignored
    "<script>alert(1)</script>",                                    # hostile anchor text: ignored
]
PROJECTS = ["torch", "amd-torch-device-gfx942", "amd-torch-device-gfx1153", "torchvision"]


def _page(names: list[str]) -> str:
    return "<!DOCTYPE html><html><body>" + "".join(f'<a href="{n}">{n}</a><br/>' for n in names) + "</body></html>"


@pytest.fixture
def index_dir(tmp_path) -> Path:
    root = tmp_path / "simple"
    (root / "torch").mkdir(parents=True)
    (root / "index.html").write_text(_page(PROJECTS))
    (root / "torch" / "index.html").write_text(_page(TORCH_FILES))
    return root


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # the request log would land in the command's output
        pass


@pytest.fixture
def index_url(index_dir):
    handler = functools.partial(_QuietHandler, directory=str(index_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def invoke(*args):
    return CliRunner().invoke(main, ["recipes", "check-upstream", *args])


def test_a_served_index_shows_the_wheels_and_archs_the_recipes_lack(index_url, tmp_path):
    releases = tmp_path / "tags.txt"
    releases.write_text("abc123\trefs/tags/rocm-7.2.4\ndef456\trefs/tags/rocm-7.3.0\n"
                        "0a1b2c\trefs/tags/therock-10.1.0\n1234ab\trefs/tags/rocm-6.1.2\n")
    result = invoke("--index", index_url, "--releases", str(releases))
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines == [
        "missing wheel: torch 2.15.0+rocm7.2: no torch line 2.15",
        "missing wheel: torch 2.9.2+rocm6.4: newer than line 2.9's pin 2.9.1",
        "missing wheel: torch 2.8.0+rocm6.3: line 2.8 does not list rocm6.3",
        "missing arch: gfx1153 (amd-torch-device-gfx1153)",
        "missing release: 7.3.0",
        "missing release: 10.1.0",
    ]


def test_a_directory_index_reads_the_same_and_a_covered_index_exits_0(index_dir):
    assert invoke("--index", str(index_dir)).output == invoke("--index", index_dir.as_uri()).output
    (index_dir / "torch" / "index.html").write_text(_page(TORCH_FILES[:2]))
    (index_dir / "index.html").write_text(_page(["torch", "amd-torch-device-gfx942"]))
    result = invoke("--index", str(index_dir))
    assert result.exit_code == 0 and "recipes cover everything" in result.output


@pytest.mark.parametrize("args, message", [
    ((), "give at least one --index or --releases"),
    (("--index", "ftp://example.org/simple/"), "only http(s)://, file:// or a local path"),
    (("--index", "/nonexistent/simple"), "cannot read"),
])
def test_bad_sources_exit_2_with_the_reason(args, message):
    result = invoke(*args)
    assert result.exit_code == 2 and message in result.output
