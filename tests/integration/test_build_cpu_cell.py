"""End to end on a real engine: build the cpu cell from the local base, run the tiny workload in it.

Built once per module like a user would (local base, proxy CA as a secret, `--network host`, the CPU
torch wheel as wheelhouse); BuildKit's cache makes later sessions fast. Set ENVBUILD_TEST_WHEELHOUSE
to a dir holding the torch 2.13.0+cpu wheel where /opt/wheels does not exist.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.engine.build import MANIFEST_LABEL
from builder.store.store import MatrixStore, validate_result
from shared_builds import one_build_at_a_time

pytestmark = [pytest.mark.docker, pytest.mark.slow]
CA = Path("/etc/ssl/certs/ca-certificates.crt")
TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def _wheelhouse(work: Path) -> Path | None:
    source = Path(os.environ.get("ENVBUILD_TEST_WHEELHOUSE", "/opt/wheels"))
    if not (source / TORCH_WHEEL).is_file():
        return None  # torch then comes from the PyTorch CPU index
    wheels = work / "wheels"
    wheels.mkdir()
    try:
        os.link(source / TORCH_WHEEL, wheels / TORCH_WHEEL)
    except OSError:
        (wheels / TORCH_WHEEL).symlink_to(source / TORCH_WHEEL)
    return wheels


def cpu_cell_command(local_base: str, work: Path, *flags: str) -> list[str]:
    """`envbuild image` for the cpu cell as a user here asks for it (proxy CA as a secret, `--network host`, the CPU
    torch wheel as wheelhouse where there is one), rendered into work/ctx, with `flags` added."""
    command = ["image", "--flavor", "cpu", "--torch", "2.13", "--base-image", local_base, "-o", str(work / "ctx")]
    command += ["--ca-cert", str(CA), "--network", "host", *flags]
    wheels = _wheelhouse(work)
    return command + ["--wheelhouse", str(wheels)] if wheels else command


@pytest.fixture(scope="module")
def cpu_cell(tmp_path_factory, local_base):
    """(build command, its CliRunner result, seconds, work dir) for the cpu cell."""
    work = tmp_path_factory.mktemp("cpu-cell")
    command = cpu_cell_command(local_base, work, "--db", str(work / "m.db"))
    started = time.monotonic()  # --force: build (and record) even if an earlier session left the tag
    with one_build_at_a_time(tmp_path_factory, "cpu-cell"):
        result = CliRunner().invoke(main, [*command, "--force"])
    assert result.exit_code == 0, result.output
    return command, result, time.monotonic() - started, work


def _tag(result) -> str:
    return result.stdout.strip().splitlines()[-1]


def test_cpu_cell_builds_with_manifest_labels(cpu_cell, docker_engine):
    _, result, _, work = cpu_cell
    tag = _tag(result)
    manifest = json.loads((work / "ctx" / "manifest.json").read_text())
    assert tag == manifest["image_tag"]
    image = docker_engine.images.get(tag)
    assert json.loads(image.labels[MANIFEST_LABEL])["cell"] == manifest["cell"]
    history = " ".join(str(h.get("CreatedBy")) for h in image.history())
    assert "BEGIN CERTIFICATE" not in history
    seen = (
        docker_engine.containers.run(
            tag,
            [
                "sh",
                "-c",
                "ls /run/secrets 2>/dev/null | wc -l; "
                "python -c 'import torch, sentencepiece; print(torch.__version__)'",
            ],
            remove=True,
        )
        .decode()
        .split()
    )
    assert seen == ["0", "2.13.0+cpu"]
    # the image proved itself at the end of its build (images/common/verify_image.py)
    verify = json.loads(docker_engine.containers.run(tag, ["cat", "/opt/envbuild/verify.json"], remove=True))
    assert verify["ok"] and verify["cell"] == manifest["cell_key"]
    assert {c["name"] for c in verify["checks"]} >= {"torch version", "sentencepiece built here", "cpu-only torch"}
    if (work / "wheels").is_dir():  # torch came from the wheelhouse file, by path, no index
        script = (
            "import importlib.metadata as m, json; d = m.distribution('torch'); "
            "print(json.loads(d.read_text('direct_url.json'))['url']); "
            "print(sorted(x.metadata['Name'] for x in m.distributions() if x.metadata['Name'].startswith('nvidia')))"
        )
        url, nvidia = docker_engine.containers.run(tag, ["python", "-c", script], remove=True).decode().split("\n")[:2]
        assert url == f"file:///wheelhouse/{TORCH_WHEEL}".replace("+", "%2B") or url.endswith(TORCH_WHEEL), url
        assert nvidia == "[]"  # PyPI's torch 2.13.0 of the same version (a CUDA build) was never chosen
    with MatrixStore.open(work / "m.db") as store:
        builds = store.builds()
    assert [(b["status"], b["image_tag"]) for b in builds] == [("pass", tag)]


def test_unchanged_request_is_skipped(cpu_cell):
    command, first, _, _ = cpu_cell
    again = CliRunner().invoke(main, command)
    assert again.exit_code == 0, again.output
    assert "skipped" in again.output and "already exists locally" in again.output
    assert _tag(again) == _tag(first)


def test_workload_runs_in_the_image_end_to_end(cpu_cell, docker_engine):
    _, build, _, work = cpu_cell
    tag, out = _tag(build), work / "run"
    result = CliRunner().invoke(
        main, ["run", "workload", "--image", tag, "--out", str(out), "--db", str(work / "m.db")]
    )
    record = json.loads((out / "result.json").read_text())
    assert result.exit_code == 0, (result.output, record.get("error"))
    validate_result(record)
    assert record["status"] == "pass" and record["error_class"] is None
    assert record["versions"]["torch"] == "2.13.0+cpu" and record["hardware"]["device_type"] == "cpu"
    assert record["metrics"]["eval_after"]["accuracy"] > record["metrics"]["eval_before"]["accuracy"]
    assert (out / record["artifacts"]["adapter_dir"]).is_dir()
    assert record["image"]["tag"] == tag and record["image"]["digest"] == docker_engine.images.get(tag).id
    assert record["image"]["manifest"]["cell"]["flavor"] == "cpu"
    assert {c["name"]: c["status"] for c in record["host"]["checks"]}["docker_engine"] == "pass"
    assert docker_engine.containers.list(all=True, filters={"label": "org.envbuild.run"}) == []
    with MatrixStore.open(work / "m.db") as store:
        runs, builds = store.runs(), store.builds()
    assert [r["result"]["run_id"] for r in runs] == [record["run_id"]]
    assert runs[0]["build_id"] == builds[0]["id"]
    # the verdict is about this environment: the local base, its digest (the local image id), the content hash
    base_id = docker_engine.images.get(builds[0]["base_image"]).id
    assert builds[0]["base_digest"] == base_id
    shown = CliRunner().invoke(main, ["matrix", "show", "cpu-torch2.13-py3.11", "--json", "--db", str(work / "m.db")])
    cell = json.loads(shown.output)
    assert (cell["status"], len(cell["runs"]), cell["attempts"]) == ("pass", 1, 0)
    assert cell["environment"] == (
        f"{builds[0]['base_image']}@{base_id.removeprefix('sha256:')[:12]}"
        f" ctx {record['image']['manifest']['context_hash'][:12]}"
    )
    build_dir, run_dir = (Path(a["attempt_dir"]) for a in cell["records"])
    assert [a["kind"] for a in cell["records"]] == ["build", "run"]
    assert (build_dir / "context" / "Dockerfile").read_text() == (work / "ctx" / "Dockerfile").read_text()
    assert "#" in (build_dir / "build.log").read_text() and builds[0]["log_path"] == str(build_dir / "build.log")
    assert json.loads((run_dir / "result.json").read_text())["run_id"] == record["run_id"]
    assert (run_dir / "container.log").read_text() == (out / "container.log").read_text()


def test_an_image_that_does_not_match_its_manifest_fails_its_build(cpu_cell, tmp_path):
    """The verify step is the last layer: an expectation the installed image does not meet (here a pin pip
    never installed) fails the build with its own failure class, from the cached layers in seconds."""
    import shutil

    from builder.engine.build import BuildError, BuildOptions, build_image
    from builder.plan.render import read_manifest

    _, _, _, work = cpu_cell
    ctx = tmp_path / "ctx"
    shutil.copytree(work / "ctx", ctx)
    expect = json.loads((ctx / "expect.json").read_text())
    expect["lock"]["peft"] = "0.0.1"
    (ctx / "expect.json").write_text(json.dumps(expect))
    options = BuildOptions(
        network="host",
        ca_cert=CA if CA.is_file() else None,
        force=True,
        wheelhouse=work / "wheels" if (work / "wheels").is_dir() else None,
    )
    with pytest.raises(BuildError) as raised:
        build_image(
            ctx,
            "envbuild-test/verify-mismatch:1",
            options,
            log_path=tmp_path / "build.log",
            manifest=read_manifest(ctx),
        )
    failure = raised.value.failure
    assert failure is not None and failure.failure_class == "image_verify_failed", failure
    assert any("peft: pinned 0.0.1, installed 0.21.2" in line for line in failure.evidence + failure.tail)
