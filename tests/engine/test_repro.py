"""`envbuild image --check-reproducible` on small real contexts (two builds; or the image already under the tag with
this context's hash against one rebuild), and the file-by-file comparison itself."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.engine.build import BuildOptions, build_image
from builder.engine.repro import Difference, check_reproducible, compare, tar_entries
from builder.plan.context import CONTEXT_HASH_LABEL


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
    (ctx / "manifest.json").write_text(json.dumps({"context_hash": HASH}))
    tag = f"envbuild-test/repro-{differing}:{tmp_path.name[-12:].lower()}"
    result = CliRunner().invoke(
        main, ["image", "--context", str(ctx), "--tag", tag, "--network", "host", "--check-reproducible"]
    )
    print(result.output)
    assert result.exit_code == (1 if differing else 0), result.output
    assert "build times: " in result.output and f"no image {tag} on the engine: building twice" in result.output
    assert report_compared(tmp_path) == "two --no-cache builds"
    assert result.stdout.strip().splitlines()[-1] == f"differing paths outside the allow-list: {differing}"
    report = json.loads((tmp_path / "ctx.repro.json").read_text())
    assert [d["path"] for d in report["differences"]] == (["/noise"] if differing else [])
    if differing:
        assert "differs: /noise (digest)" in result.output
    for temporary in report["tags"]:  # both builds are removed again; the content-hash tag was never made
        assert not docker_engine.images.list(name=temporary)
    assert not docker_engine.images.list(name=tag)


def report_compared(tmp_path) -> str:
    return json.loads((tmp_path / "ctx.repro.json").read_text())["compared"]


HASH = "c0ffee" * 10 + "c0ff"  # a context hash (64 hex digits) the tiny contexts' manifests name


@pytest.fixture
def existing(tmp_path, local_base, docker_engine):
    """make(step, labelled_hash) -> (context dir, tag, image id): a tiny context whose manifest.json names HASH and the
    tag, and the image already built from it under that tag with `labelled_hash` as its context-hash label (an earlier
    build); every image of the tag's repository is removed afterwards."""
    repository = f"envbuild-test/repro-existing-{tmp_path.name[-12:].lower()}"
    ctx = tmp_path / "ctx"

    def make(step: str, labelled_hash: str = HASH) -> tuple:
        ctx.mkdir()
        (ctx / "Dockerfile").write_text(f"FROM {local_base}\n{step}\n")
        tag = f"{repository}:{HASH[:12]}"
        built = build_image(
            ctx,
            tag,
            BuildOptions(network="host"),
            log_path=tmp_path / "earlier.log",
            manifest={"context_hash": labelled_hash},
        )
        (ctx / "manifest.json").write_text(json.dumps({"context_hash": HASH, "image_tag": tag}))
        assert docker_engine.images.get(tag).labels[CONTEXT_HASH_LABEL] == labelled_hash
        return ctx, tag, built.image_id

    yield make
    for image in docker_engine.images.list(name=repository):
        for tag in image.tags:
            docker_engine.images.remove(tag, force=True)


def _check(ctx, *flags) -> object:
    result = CliRunner().invoke(
        main, ["image", "--context", str(ctx), "--network", "host", "--check-reproducible", *flags]
    )
    print(result.output)
    return result


def _tags_of(docker_engine, tag: str) -> list[str]:
    """Every tag of `tag`'s repository on the engine (the temporary ones would be there too)."""
    return sorted(t for image in docker_engine.images.list(name=tag.rsplit(":", 1)[0]) for t in image.tags)


@pytest.mark.docker
def test_an_existing_image_of_this_context_is_compared_with_one_rebuild_and_kept(existing, tmp_path, docker_engine):
    ctx, tag, image_id = existing("RUN echo same > /same")
    result = _check(ctx)
    assert result.exit_code == 0, result.output
    assert f"{tag} exists (id {image_id}) with this context's hash: comparing it with one --no-cache rebuild" in (
        result.output
    )
    report = json.loads((tmp_path / "ctx.repro.json").read_text())
    assert report["compared"] == f"existing image {tag} (id {image_id}) against one --no-cache rebuild"
    assert len(report["build_seconds"]) == 1 and report["existing_image"] == image_id
    assert report["tags"][0] == tag and report["tags"][1].startswith(f"{tag}-repro-")
    assert report["paths"] > 1000 and report["counted"] == 0
    assert (tmp_path / "ctx.build.rebuild.log").is_file() and not (tmp_path / "ctx.build.1.log").exists()
    assert "compared: existing image" in result.output and "build time: " in result.output
    # the existing image keeps its tag and id; the rebuild's temporary tag is gone
    assert docker_engine.images.get(tag).id == image_id
    assert _tags_of(docker_engine, tag) == [tag]


@pytest.mark.docker
@pytest.mark.parametrize(
    "labelled, flags, why",
    [
        ("0" * 64, [], f"is labelled context hash {'0' * 64}, this context's is {HASH}: building twice"),
        (HASH, ["--rebuild-twice"], "--rebuild-twice: the existing image is not used: building twice"),
    ],
    ids=["mismatching-label", "rebuild-twice"],
)
def test_a_mismatching_label_or_rebuild_twice_builds_twice(labelled, flags, why, existing, tmp_path, docker_engine):
    ctx, tag, image_id = existing("RUN echo same > /same", labelled)
    result = _check(ctx, *flags)
    assert result.exit_code == 0, result.output
    assert why in result.output
    report = json.loads((tmp_path / "ctx.repro.json").read_text())
    assert report["compared"] == "two --no-cache builds" and report["existing_image"] is None
    assert len(report["build_seconds"]) == 2 and all(t.startswith(f"{tag}-repro-") for t in report["tags"])
    assert docker_engine.images.get(tag).id == image_id and _tags_of(docker_engine, tag) == [tag]


@pytest.mark.docker
def test_a_difference_between_the_existing_image_and_the_rebuild_fails(existing, tmp_path, docker_engine):
    ctx, tag, image_id = existing("RUN echo same > /same && head -c 16 /dev/urandom > /noise")
    result = _check(ctx)
    assert result.exit_code == 1, result.output
    assert "differs: /noise (digest)" in result.output
    assert result.stdout.strip().splitlines()[-1] == "differing paths outside the allow-list: 1"
    report = json.loads((tmp_path / "ctx.repro.json").read_text())
    assert report["existing_image"] == image_id and len(report["build_seconds"]) == 1
    assert [(d["path"], d["what"]) for d in report["differences"]] == [("/noise", "digest")]
    assert docker_engine.images.get(tag).id == image_id and _tags_of(docker_engine, tag) == [tag]


@pytest.mark.docker
def test_ctrl_c_while_the_images_are_read_removes_the_rebuild_and_keeps_the_existing_image(
    existing, tmp_path, docker_engine
):
    ctx, tag, image_id = existing("RUN echo same > /same")
    seen = []

    def notify(event):
        seen.append(event)
        if isinstance(event, str) and event.startswith("reading the filesystem of"):
            assert _tags_of(docker_engine, tag) != [tag]  # the rebuild is there now
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check_reproducible(
            ctx, tag, BuildOptions(network="host"), notify, tmp_path / "ctx.build.log", {"context_hash": HASH}
        )
    assert any(isinstance(e, str) and "one --no-cache rebuild" in e for e in seen)
    assert docker_engine.images.get(tag).id == image_id and _tags_of(docker_engine, tag) == [tag]


def test_rebuild_twice_without_check_reproducible_is_refused(tmp_path):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM scratch\n")
    result = CliRunner().invoke(main, ["image", "--context", str(ctx), "--rebuild-twice"])
    assert result.exit_code == 2 and "--rebuild-twice is a mode of --check-reproducible" in result.output


def test_check_reproducible_with_push_is_refused_before_anything_is_written(tmp_path):
    result = CliRunner().invoke(
        main,
        ["image", "--flavor", "cpu", "--torch", "2.13", "-o", str(tmp_path / "ctx"), "--check-reproducible", "--push"],
    )
    assert result.exit_code == 2 and "nothing to --push" in result.output
    assert not (tmp_path / "ctx").exists()
