"""`envbuild recipes check-upstream` against a PEP 503 index this test builds and serves over HTTP."""

from __future__ import annotations

import functools
import shutil
import ssl
import subprocess
import http.server
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main

TORCH_FILES = [
    "torch-2.11.0+rocm7.2-cp312-cp312-manylinux_2_28_x86_64.whl",  # in the recipes: nothing to report
    "torch-2.11.0%2Brocm7.2-cp313-cp313-manylinux_2_28_x86_64.whl",  # same wheel, another Python, URL-quoted
    "torch-2.15.0+rocm7.2-cp312-cp312-manylinux_2_28_x86_64.whl",  # a line the recipes lack
    "torch-2.9.2+rocm6.4-cp310-cp310-manylinux_2_28_x86_64.whl",  # newer than the 2.9 line's pin (2.9.1)
    "torch-2.8.0+rocm6.3-cp310-cp310-manylinux_2_28_x86_64.whl",  # pinned version, index suffix not listed
    "torch-2.9.0+rocm6.4-cp310-cp310-manylinux_2_28_x86_64.whl",  # older than the pin: not news
    "torch-2.14.0+rocm10.1.0-cp312-cp312-manylinux_2_28_x86_64.whl",  # AMD's build the 10.1 cells take: nothing
    "torch-2.13.0+rocm10.1.0-cp312-cp312-manylinux_2_28_x86_64.whl",  # AMD's build of a line 10.1 does not list
    "torch-2.15.0+rocm10.2.0-cp312-cp312-manylinux_2_28_x86_64.whl",  # a line and a ROCm release the recipes lack
    "torch-2.13.0-cp311-none-macosx_11_0_arm64.whl",  # not a ROCm Linux wheel: ignored
    "<script>alert(1)</script>",  # hostile anchor text: ignored
]
#: The `rocm` meta package of AMD's indexes: the ROCm releases the index carries.
ROCM_FILES = [
    "rocm-7.13.0.tar.gz",  # older than the recipes' 7.x releases: not news
    "rocm-7.14.0.tar.gz",  # [release."7.14"] pins it
    "rocm-7.14.1-py3-none-any.whl",  # [release."7.14.1"] pins it
    "rocm-7.14.2.tar.gz",  # a point release after the newest 7.14 the recipes pin
    "rocm-10.1.0.tar.gz",  # [release."10.1"] pins it
    "rocm-10.2.0a20260916.tar.gz",  # a pre-release: not news
]
PROJECTS = ["torch", "rocm", "amd-torch-device-gfx942", "amd-torch-device-gfx1153", "torchvision"]


def _page(names: list[str]) -> str:
    return "<!DOCTYPE html><html><body>" + "".join(f'<a href="{n}">{n}</a><br/>' for n in names) + "</body></html>"


@pytest.fixture
def index_dir(tmp_path) -> Path:
    root = tmp_path / "simple"
    (root / "torch").mkdir(parents=True)
    (root / "index.html").write_text(_page(PROJECTS))
    (root / "torch" / "index.html").write_text(_page(TORCH_FILES))
    (root / "rocm").mkdir()
    (root / "rocm" / "index.html").write_text(_page(ROCM_FILES))
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


def test_a_served_index_shows_the_wheels_archs_and_newer_releases_the_recipes_lack(index_url, tmp_path):
    releases = tmp_path / "tags.txt"
    releases.write_text(
        "abc123\trefs/tags/rocm-7.2.4\ndef456\trefs/tags/rocm-7.3.0\n"  # a line the base image tag 7.2 covers; older
        "0a1b2c\trefs/tags/therock-10.1.0\n1234ab\trefs/tags/rocm-6.1.2\n"  # both in the recipes
        "5678cd\trefs/tags/therock-11.0.0\n9abcde\trefs/tags/therock-11.1.0rc1\n"  # newer; a pre-release
        "f0e1d2\trefs/heads/release/bkc/therock-10.1-20260811\n"  # a branch, not a release
    )
    result = invoke("--index", index_url, "--releases", str(releases))
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines == [
        "missing wheel: torch 2.15.0+rocm7.2: no torch line 2.15",
        "missing wheel: torch 2.9.2+rocm6.4: newer than line 2.9's pin 2.9.1",
        "missing wheel: torch 2.8.0+rocm6.3: line 2.8 does not list rocm6.3",
        "missing wheel: torch 2.13.0+rocm10.1.0: line 2.13 does not list rocm10.1.0",
        "missing wheel: torch 2.15.0+rocm10.2.0: no torch line 2.15",
        "missing arch: gfx1153 (amd-torch-device-gfx1153)",
        "missing release: 7.14.2 (rocm 7.14.2)",
        "missing release: 10.2.0 (torch 2.15.0+rocm10.2.0)",
        "missing release: 11.0.0",
    ]


def test_a_directory_index_reads_the_same_and_a_covered_index_exits_0(index_dir):
    assert invoke("--index", str(index_dir)).output == invoke("--index", index_dir.as_uri()).output
    (index_dir / "torch" / "index.html").write_text(_page(TORCH_FILES[:2] + TORCH_FILES[6:7]))
    (index_dir / "rocm" / "index.html").write_text(_page(ROCM_FILES[:2] + ROCM_FILES[4:]))
    (index_dir / "index.html").write_text(_page(["torch", "rocm", "amd-torch-device-gfx942"]))
    result = invoke("--index", str(index_dir))
    assert result.exit_code == 0 and "recipes cover everything" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        ((), "give at least one --index or --releases"),
        (("--index", "ftp://example.org/simple/"), "only http(s)://, file:// or a local path"),
        (("--index", "/nonexistent/simple"), "cannot read"),
    ],
)
def test_bad_sources_exit_2_with_the_reason(args, message):
    result = invoke(*args)
    assert result.exit_code == 2 and message in result.output


PINNED = "torch-2.5.1+rocm6.2-cp310-cp310-linux_x86_64.whl"  # recipes/torch.toml pins 2.5.1 with rocm6.2
DIGEST = "ab" * 32  # test data: the value the served page lists, not the real wheel's


def test_record_writes_the_listed_sha256_of_pinned_wheels_and_the_manifest_names_them(index_dir, tmp_path, monkeypatch):
    """A PEP 503 link's #sha256= of a wheel a recipe pins is recorded; unpinned wheels and malformed digests are
    not; a plan of that wheel then names the hash instead of "unhashed"."""
    links = [
        (PINNED, f"{PINNED}#sha256={DIGEST}"),
        ("torch-2.5.1+rocm6.2-cp311-cp311-linux_x86_64.whl", "x.whl#sha256=nothex"),  # malformed digest
        ("torch-2.12.0+rocm7.2-cp312-cp312-manylinux_2_28_x86_64.whl", f"y.whl#sha256={'cd' * 32}"),  # no line
        ("torch-2.5.0+rocm6.2-cp310-cp310-linux_x86_64.whl", f"z.whl#sha256={'ef' * 32}"),  # not the pin
        ("torch-2.5.1+rocm6.0-cp310-cp310-linux_x86_64.whl", f"w.whl#sha256={'01' * 32}"),
    ]  # suffix not listed
    (index_dir / "torch" / "index.html").write_text(
        "<html><body>" + "".join(f'<a href="{h}">{n}</a>' for n, h in links) + "</body></html>"
    )
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("ENVBUILD_RECIPES", str(site))
    result = invoke("--index", str(index_dir), "--record")
    assert "recorded the sha256 of 1 pinned torch wheels" in result.output, result.output
    assert f'"{PINNED}" = "{DIGEST}"' in (site / "wheel-hashes.toml").read_text()
    assert "2.12.0" not in (site / "wheel-hashes.toml").read_text()

    from builder.paths import RECIPES_DIR
    from builder.plan.recipes import load
    from builder.plan.resolve import Request, resolve

    copy = tmp_path / "recipes"
    shutil.copytree(RECIPES_DIR, copy)
    shutil.copy(site / "wheel-hashes.toml", copy / "wheel-hashes.toml")
    recipes = load(copy)
    assert resolve(Request(accel_version="6.2", torch="2.5"), recipes).pinned()["torch"]["wheel_hashes"] == {
        PINNED: DIGEST
    }
    assert (
        resolve(Request(accel_version="6.2", torch="2.5", python="3.11"), recipes).pinned()["torch"]["wheel_hashes"]
        == "unhashed"
    )  # recorded for cp310 only
    assert resolve(Request(accel_version="6.2", torch="2.5")).pinned()["torch"]["wheel_hashes"] == "unhashed"


def test_a_page_the_parser_cannot_read_is_named_when_hashes_are_read():
    """The hash reader refuses a page html.parser cannot read (an unknown "<![") as the index reader does."""
    from builder.plan.recipes import load
    from builder.plan.upstream import UpstreamError
    from builder.plan.wheel_hashes import pinned_hashes

    with pytest.raises(UpstreamError, match=r"https://example\.org/simple/torch/: not an HTML index page"):
        pinned_hashes("<html><![ bogus", load(), where="https://example.org/simple/torch/")


def test_a_release_is_news_only_when_newer_than_what_the_recipes_pin_in_its_line(recipes_copy):
    """A pip-route release pins its exact ROCm version (rocm==7.14.1): 7.14.0 and 7.14.1 are covered, a later 7.14.x
    is news, an earlier one is not; a base-image release named by its line (7.2) covers every 7.2.x; a line older
    than the recipes' newest (7.13) is not news, a newer one (10.2, 11.0) is."""
    from builder.plan.recipes import load
    from builder.plan.upstream import newer_releases

    versions = ["7.14.0", "7.14.1", "7.14.2", "7.2.5", "7.13.0", "10.1.0", "10.2.0", "11.0", "6.2.4"]
    assert newer_releases(versions, load(recipes_copy)) == ["7.14.2", "10.2.0", "11.0"]
    rocm = recipes_copy / "rocm.toml"
    rocm.write_text(rocm.read_text().replace("==7.14.1", "==7.14.3"))  # the 7.14.1 release now pins 7.14.3
    load.cache_clear()
    assert newer_releases(["7.14.1", "7.14.2", "7.14.4"], load(recipes_copy)) == ["7.14.4"]


def _serve(handler, host: str = "127.0.0.1", context: ssl.SSLContext | None = None):
    """A threaded server on `host` (TLS with `context`), stopped by the returned function."""
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.shutdown


def _index_handler(target):
    """An index (at /) listing torch; any other page answers 302 to `target(path)`, or lists the pinned wheel's
    sha256 where `target` gives None."""

    class Handler(_QuietHandler):
        def do_GET(self):
            if self.path == "/":
                body = _page(["torch"]).encode()
            elif location := target(self.path):
                self.send_response(302)
                self.send_header("Location", location)
                self.end_headers()
                return
            else:
                body = f'<a href="{PINNED}#sha256={DIGEST}">{PINNED}</a>'.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.fixture
def tls(tmp_path, monkeypatch):
    """A server-side TLS context for 127.0.0.1 whose self-signed certificate this process trusts (SSL_CERT_FILE)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


@pytest.mark.parametrize("record", [False, True])
def test_a_redirect_to_another_host_is_not_followed_and_nothing_is_recorded(tmp_path, monkeypatch, record):
    """The index's torch page redirects to another host (127.0.0.2) that lists a sha256 for the pinned wheel:
    exit 2 naming both URLs, and no hash of that host is written."""
    other, stop_other = _serve(_index_handler(lambda path: None), host="127.0.0.2")
    target = f"http://127.0.0.2:{other.server_address[1]}/torch/"
    index, stop_index = _serve(_index_handler(lambda path: target))
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("ENVBUILD_RECIPES", str(site))
    try:
        result = invoke("--index", f"http://127.0.0.1:{index.server_address[1]}/", *(["--record"] if record else []))
    finally:
        stop_index()
        stop_other()
    assert result.exit_code == 2, result.output
    assert "redirected to another host" in result.output and target in result.output
    assert not any(site.iterdir())


def test_an_https_index_is_never_redirected_to_http(tmp_path, tls, monkeypatch):
    """On the same host, a redirect from https to http is refused; an https redirect there is followed."""
    plain, stop_plain = _serve(_index_handler(lambda path: None))
    downgrade = f"http://127.0.0.1:{plain.server_address[1]}/torch/"
    secure, stop_secure = _serve(_index_handler(lambda path: downgrade), context=tls)
    same, stop_same = _serve(_index_handler(lambda path: "/moved/torch/" if path == "/torch/" else None), context=tls)
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setenv("ENVBUILD_RECIPES", str(site))
    try:
        refused = invoke("--index", f"https://127.0.0.1:{secure.server_address[1]}/", "--record")
        assert refused.exit_code == 2 and "redirected from https to http" in refused.output, refused.output
        assert not any(site.iterdir())
        followed = invoke("--index", f"https://127.0.0.1:{same.server_address[1]}/", "--record")
    finally:
        stop_plain()
        stop_secure()
        stop_same()
    assert followed.exit_code == 0, followed.output
    assert f'"{PINNED}" = "{DIGEST}"' in (site / "wheel-hashes.toml").read_text()


def test_recording_keeps_the_sources_above_the_table_and_reads_cpu_wheels(tmp_path):
    """wheel-hashes.toml names where its digests come from in comments above [wheel]: recording more keeps them. A
    CPU wheel's local label (`+cpu`, no digits) is a wheel name like the others."""
    from builder.plan import wheel_hashes

    cpu = "torch-2.13.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl"
    (tmp_path / "wheel-hashes.toml").write_text(f'# the source of these digests\n\n[wheel]\n"{cpu}" = "{"ab" * 32}"\n')
    wheel_hashes.record(tmp_path, {PINNED: DIGEST})
    text = (tmp_path / "wheel-hashes.toml").read_text()
    assert text.startswith("# the source of these digests\n") and wheel_hashes.read(tmp_path) == {
        cpu: "ab" * 32,
        PINNED: DIGEST,
    }
    assert wheel_hashes.for_requirement(wheel_hashes.read(tmp_path), "2.13.0+cpu", "3.12") == {cpu: "ab" * 32}
