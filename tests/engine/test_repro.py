"""`envbuild image --check-reproducible` on small real contexts, and the file-by-file comparison itself."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.engine.repro import Difference, compare, tar_entries


def _tar(members: dict[str, tuple]) -> io.BytesIO:
    """An in-memory tar: path -> ("file", bytes, mode) | ("symlink", target) | ("dir", mode)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, spec in members.items():
            info = tarfile.TarInfo(name)
            info.mtime = hash(name) % 10**9  # mtimes differ on purpose: they are not compared
            if spec[0] == "file":
                info.size, info.mode = len(spec[1]), spec[2]
                tar.addfile(info, io.BytesIO(spec[1]))
            elif spec[0] == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, spec[1]
                tar.addfile(info)
            else:
                info.type, info.mode = tarfile.DIRTYPE, spec[1]
                tar.addfile(info)
    buffer.seek(0)
    return buffer


def test_compare_names_each_kind_of_difference_and_ignores_mtime():
    a = tar_entries(
        _tar(
            {
                "etc": ("dir", 0o755),
                "etc/same": ("file", b"x", 0o644),
                "etc/data": ("file", b"1", 0o644),
                "./.dotfile": ("file", b"", 0o644),
                "etc/mode": ("file", b"m", 0o644),
                "etc/link": ("symlink", "same"),
                "etc/gone": ("file", b"", 0o644),
            }
        )
    )
    assert "/.dotfile" in a and "/etc/same" in a
    b = tar_entries(
        _tar(
            {
                "etc": ("dir", 0o755),
                "etc/same": ("file", b"x", 0o644),
                "etc/data": ("file", b"2", 0o644),
                "etc/mode": ("file", b"m", 0o755),
                "etc/link": ("symlink", "data"),
                "etc/new": ("file", b"", 0o644),
            }
        )
    )
    assert compare(a, b, {"/etc/new": "a test reason"}) == [
        Difference("/.dotfile", "only in A", None),
        Difference("/etc/data", "digest", None),
        Difference("/etc/gone", "only in A", None),
        Difference("/etc/link", "digest", None),
        Difference("/etc/mode", "mode", None),
        Difference("/etc/new", "only in B", "a test reason"),
    ]


@pytest.mark.docker
@pytest.mark.parametrize(
    "step, differing",
    [
        ("RUN echo same > /same", 0),
        ("RUN echo same > /same && head -c 16 /dev/urandom > /noise", 1),
    ],
)
def test_check_reproducible_builds_twice_and_fails_on_a_difference(
    step, differing, tmp_path, local_base, docker_engine
):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(f"FROM {local_base}\n{step}\n")
    tag = f"envbuild-test/repro-{differing}:{tmp_path.name[-12:].lower()}"
    result = CliRunner().invoke(
        main, ["image", "--context", str(ctx), "--tag", tag, "--network", "host", "--check-reproducible"]
    )
    print(result.output)
    assert result.exit_code == (1 if differing else 0), result.output
    assert "build times: " in result.output
    assert result.stdout.strip().splitlines()[-1] == f"differing paths outside the allow-list: {differing}"
    report = json.loads((tmp_path / "ctx.repro.json").read_text())
    assert [d["path"] for d in report["differences"]] == (["/noise"] if differing else [])
    if differing:
        assert "differs: /noise (digest)" in result.output
    for temporary in report["tags"]:  # both builds are removed again; the content-hash tag was never made
        assert not docker_engine.images.list(name=temporary)
    assert not docker_engine.images.list(name=tag)


def test_check_reproducible_with_push_is_refused_before_anything_is_written(tmp_path):
    result = CliRunner().invoke(
        main,
        ["image", "--flavor", "cpu", "--torch", "2.13", "-o", str(tmp_path / "ctx"), "--check-reproducible", "--push"],
    )
    assert result.exit_code == 2 and "nothing to --push" in result.output
    assert not (tmp_path / "ctx").exists()
