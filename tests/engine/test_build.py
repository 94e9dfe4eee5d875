"""The BuildKit driver on small real contexts: failure classes, logs, secrets, proxies, skip, Ctrl-C."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker.errors
import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.engine.build import (
    BuildEnded,
    BuildError,
    Building,
    BuildOptions,
    Built,
    Skipped,
    StepFinished,
    StepRunning,
    build_command,
    build_image,
)
from builder.plan.render import read_manifest
from builder.engine.build_log import PlainLog, diagnose
from builder.engine.docker import BuildTool
from sleeper_fixtures import sleeper_dockerfile, step_started

pytestmark = pytest.mark.docker
CA = Path("/etc/ssl/certs/ca-certificates.crt")
ENVBUILD = [sys.executable, "-c", "from builder.cli import main; main()"]


def context(tmp_path: Path, dockerfile: str, **files: str) -> Path:
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text(dockerfile)
    for name, text in files.items():
        (ctx / name).write_text(text)
    return ctx


def build_cli(ctx: Path, tag: str, *args: str):
    return CliRunner().invoke(main, ["image", "--context", str(ctx), "--tag", tag, "--no-record", *args])


def assert_absent(engine, tag: str) -> None:
    with pytest.raises(docker.errors.ImageNotFound):
        engine.images.get(tag)


def test_missing_base_image(tmp_path, docker_engine):
    ctx = context(tmp_path, "FROM envbuild-local/debian:no-such-tag\nRUN true\n")
    result = build_cli(ctx, "envbuild-test/missing-base:1", "--network", "host")
    assert result.exit_code == 1
    assert "base_image_unavailable" in result.output and "load metadata for" in result.output
    assert (tmp_path / "ctx.build.log").read_text().startswith("# builder: ")
    assert_absent(docker_engine, "envbuild-test/missing-base:1")


def test_network_failure_shows_step_tail_and_class(tmp_path, local_base, docker_engine):
    ctx = context(
        tmp_path, f"FROM {local_base}\nRUN apt-get -o APT::Update::Error-Mode=any -o Acquire::Retries=0 update\n"
    )
    result = build_cli(ctx, "envbuild-test/no-network:1", "--network", "none")
    assert result.exit_code == 1
    assert "network_pip_index" in result.output
    assert "[2/2] RUN apt-get" in result.output  # the failing step
    assert "Temporary failure resolving" in result.output  # its last output lines
    assert "Temporary failure resolving" in (tmp_path / "ctx.build.log").read_text()


def test_patch_that_does_not_apply(tmp_path, tools_image):
    patch = (
        "diff --git a/hello.txt b/hello.txt\n--- a/hello.txt\n+++ b/hello.txt\n@@ -1 +1 @@\n-goodbye\n+hello, patched\n"
    )
    ctx = context(
        tmp_path,
        f"FROM {tools_image}\n"
        "RUN mkdir /src && cd /src && git init -q && echo hello > hello.txt\n"
        "COPY fix.patch /fix.patch\n"
        "RUN cd /src && git apply --check /fix.patch\n",
        **{"fix.patch": patch},
    )
    result = build_cli(ctx, "envbuild-test/bad-patch:1", "--network", "host")
    assert result.exit_code == 1
    assert "patch_does_not_apply" in result.output and "patch does not apply" in result.output


def test_pip_package_not_on_index(tmp_path, tools_image):
    ctx = context(
        tmp_path,
        f"FROM {tools_image}\n"
        "RUN --mount=type=secret,id=envbuild_ca python3 -m pip install "
        "--break-system-packages --cert /run/secrets/envbuild_ca --retries 1 "
        "envbuild-no-such-package-4c9e2\n",
    )
    result = build_cli(ctx, "envbuild-test/bad-pip:1", "--network", "host", "--ca-cert", str(CA))
    assert result.exit_code == 1
    assert "network_pip_index" in result.output
    assert "No matching distribution found" in result.output


def test_ca_secret_reaches_run_but_no_layer(tmp_path, local_base, docker_engine):
    ctx = context(
        tmp_path,
        f"FROM {local_base}\n"
        "RUN --mount=type=secret,id=envbuild_ca sha256sum /run/secrets/envbuild_ca "
        "| cut -d' ' -f1 > /ca.sha256\n",
    )
    tag = "envbuild-test/ca-secret:1"
    outcome = build_image(ctx, tag, BuildOptions(ca_cert=CA, network="host", force=True), manifest=read_manifest(ctx))
    assert not outcome.skipped and outcome.log_path.is_file()
    try:
        seen = docker_engine.containers.run(
            tag, ["sh", "-c", "cat /ca.sha256; ls /run/secrets 2>/dev/null | wc -l"], remove=True
        ).decode()
        digest, secrets_left = seen.split()
        assert digest == hashlib.sha256(CA.read_bytes()).hexdigest()
        assert secrets_left == "0"
        history = " ".join(str(h.get("CreatedBy")) for h in docker_engine.images.get(tag).history())
        assert "BEGIN CERTIFICATE" not in history and str(CA) not in history
    finally:
        docker_engine.images.remove(tag, force=True)


def test_proxies_pass_through_without_appearing_in_the_log(tmp_path, local_base, docker_engine, monkeypatch):
    proxy = "http://user:s3cret@proxy.invalid:3128"
    monkeypatch.setenv("HTTPS_PROXY", proxy)
    monkeypatch.setenv("no_proxy", "localhost,.internal")
    ctx = context(tmp_path, f'FROM {local_base}\nRUN echo "$HTTPS_PROXY|$no_proxy" > /proxies\n')
    tag = "envbuild-test/proxies:1"
    outcome = build_image(ctx, tag, BuildOptions(network="host", force=True), manifest=read_manifest(ctx))
    try:
        seen = docker_engine.containers.run(tag, ["cat", "/proxies"], remove=True).decode().strip()
        assert seen == f"{proxy}|localhost,.internal"
        assert "s3cret" not in outcome.log_path.read_text()  # neither the command line nor the output
        image_env = " ".join(docker_engine.images.get(tag).attrs["Config"].get("Env") or [])
        assert "s3cret" not in image_env
    finally:
        docker_engine.images.remove(tag, force=True)


def test_a_build_is_told_step_by_step_and_ends_before_its_outcome(tmp_path, local_base, docker_engine):
    """The engine tells a build as events, each step's name and output as BuildKit wrote them; BuildEnded comes
    before the outcome, a failure included, and a skipped build tells only that."""
    ctx = context(tmp_path, f"FROM {local_base}\nRUN echo '[bold]from the step[/]' && sleep 1\n")
    tag = f"envbuild-test/events:{tmp_path.name[-12:].lower()}"
    events: list = []
    try:
        build_image(ctx, tag, BuildOptions(network="host", force=True, no_cache=True), events.append)
        kinds = [type(e) for e in events]
        assert kinds[0] is Building and events[0].log_path == tmp_path / "ctx.build.log"
        assert kinds[-2:] == [BuildEnded, Built] and events[-1].tag == tag
        finished = [e.step for e in events if isinstance(e, StepFinished)]
        assert finished[-2:] == ["[2/2] RUN echo '[bold]from the step[/]' && sleep 1", "exporting to image"]
        assert StepRunning(finished[-2], "[bold]from the step[/]") in events
        assert kinds.index(BuildEnded) > max(i for i, k in enumerate(kinds) if k in (StepRunning, StepFinished))
        events.clear()
        build_image(ctx, tag, BuildOptions(network="host"), events.append)
        assert [type(e) for e in events] == [Skipped] and events[0].where == "locally"
        (ctx / "Dockerfile").write_text(f"FROM {local_base}\nRUN exit 3\n")
        events.clear()
        with pytest.raises(BuildError):
            build_image(ctx, f"{tag}-failed", BuildOptions(network="host", force=True), events.append)
        assert type(events[0]) is Building and type(events[-1]) is BuildEnded
    finally:
        docker_engine.images.remove(tag, force=True)


def test_existing_tag_is_skipped(tmp_path, local_base, docker_engine):
    ctx = context(tmp_path, f"FROM {local_base}\nRUN echo built > /built\n")
    tag = "envbuild-test/skip:1"
    try:
        first = build_cli(ctx, tag, "--network", "host", "--force")
        assert first.exit_code == 0 and "built envbuild-test/skip:1" in first.output
        second = build_cli(ctx, tag, "--network", "host")
        assert second.exit_code == 0
        assert "skipped" in second.output and "already exists locally" in second.output
    finally:
        docker_engine.images.remove(tag, force=True)


def test_wheelhouse_disables_the_index_and_secrets_are_referenced(tmp_path):
    ctx = context(tmp_path, "FROM scratch\n")
    tool = BuildTool("/usr/bin/docker", "docker-build", ("/usr/bin/docker", "build"), {"DOCKER_BUILDKIT": "1"})
    argv = build_command(tool, ctx, "t:1", BuildOptions(wheelhouse=tmp_path, ca_cert=CA, network="host"), {})
    assert "TORCH_INDEX_URL=" in argv and f"id=envbuild_ca,src={CA.resolve()}" in argv
    buildx = BuildTool("/x/docker", "buildx", ("/x/docker", "buildx", "build"))
    assert "--load" in build_command(buildx, ctx, "t:1", BuildOptions(cache_to=("type=local,dest=/c",)), {})
    with pytest.raises(Exception, match="needs docker buildx"):
        build_command(tool, ctx, "t:1", BuildOptions(cache_to=("type=local,dest=/c",)), {})


def test_a_wheel_added_after_rendering_is_refused_before_building(tmp_path, docker_engine):
    """The tag covers the wheelhouse: a wheel dropped into a rendered context would build other content
    under the same tag, so the build stops and says how to re-render."""
    from builder.plan.render import render
    from builder.plan.resolve import Request, resolve

    ctx = render(resolve(Request(flavor="cpu", torch="2.13")), tmp_path / "ctx").out_dir
    (ctx / "wheelhouse" / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"PK")
    with pytest.raises(BuildError, match=r"is not what its manifest.json hashed \(added: wheelhouse/torch-2.13.0"):
        build_image(ctx, "envbuild-test/wheelhouse-mismatch:1", BuildOptions(force=True), manifest=read_manifest(ctx))
    result = build_cli(ctx, "envbuild-test/wheelhouse-mismatch:1", "--force")
    assert result.exit_code == 2 and "Re-render the context" in result.output


@pytest.mark.parametrize(
    "output, expected",
    [
        ("c++: fatal error: Killed signal terminated program cc1plus", "compiler_out_of_memory"),
        (
            '  File "/src/pytorch/torch/utils/hipify/hipify_python.py", line 812, in preprocessor\n'
            "KeyError: 'cudaFoo'",
            "hipify_error",
        ),
        (
            "ERROR: Cannot install a==1 and b==2 because these package versions have conflicting dependencies.\n"
            "ERROR: ResolutionImpossible: for help visit ...",
            "dependency_conflict",
        ),
        ("CMake Error at CMakeLists.txt:3 (project):", "compile_error"),
        ("something odd happened", "unknown"),
    ],
)
def test_classification_of_step_output(output, expected):
    log = PlainLog()
    for line in [
        "#7 [builder 4/9] RUN python tools/amd_build/build_amd.py && python setup.py bdist_wheel",
        *(f"#7 12.5 {text}" for text in output.splitlines()),
        "#7 ERROR: executor failed running [/bin/sh -c ...]: exit code: 1",
    ]:
        log.feed(line)
    failure = diagnose(log)
    assert failure.failure_class == expected
    assert failure.step.startswith("[builder 4/9] RUN") and failure.tail[-1] == output.splitlines()[-1]


def test_no_engine_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/absent.sock")
    ctx = context(tmp_path, "FROM scratch\n")
    result = build_cli(ctx, "envbuild-test/none:1")
    assert result.exit_code == 2 and "no Docker engine answers" in result.output  # a missing prerequisite
    assert "systemctl start docker" in result.output and ".ci/" not in result.output  # how, not our CI script


def test_ctrl_c_stops_the_build_and_tags_nothing(tmp_path, local_base, docker_engine):
    ctx = context(tmp_path, sleeper_dockerfile(local_base))
    tag = f"envbuild-test/interrupted:{os.getpid()}-{time.time_ns()}"  # never one an earlier run left
    proc = subprocess.Popen(
        [*ENVBUILD, "image", "--context", str(ctx), "--tag", tag, "--network", "host", "--no-record", "--force"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log = tmp_path / "ctx.build.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (log.exists() and step_started(log.read_text())):
        time.sleep(0.5)
    assert step_started(log.read_text()), "the build never reached its RUN step"
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert "interrupted" in output
    assert_absent(docker_engine, tag)


def test_cause_lines_are_picked_out_of_a_long_step():
    log = PlainLog()
    lines = [
        "-- Detecting CXX compile features - done",
        "CMake Error at ExternalProject.cmake:2790 (message):",
        "  error: could not find git for clone of abseil-cpp-populate",
        *[f'  File "/usr/lib/python3.11/x{i}.py", line {i}, in run' for i in range(40)],
        "ERROR: Failed building wheel for sentencepiece",
    ]
    log.feed("#9 [sentencepiece 2/2] RUN pip wheel --no-binary sentencepiece sentencepiece")
    for line in lines:
        log.feed(f"#9 98.0 {line}")
    log.feed("#9 ERROR: executor failed running [/bin/sh -c pip wheel]: exit code: 1")
    failure = diagnose(log)
    assert failure.failure_class == "compile_error"
    assert failure.evidence == (
        "CMake Error at ExternalProject.cmake:2790 (message):",
        "error: could not find git for clone of abseil-cpp-populate",
    )
    assert len(failure.tail) == 25 and failure.tail[-1] == lines[-1]


def test_push_to_an_unreachable_registry_fails_clearly(tmp_path, local_base, docker_engine):
    ctx = context(tmp_path, f"FROM {local_base}\nRUN echo push-me > /p\n")
    result = CliRunner().invoke(
        main,
        [
            "image",
            "--context",
            str(ctx),
            "--tag",
            "envbuild-test/push:1",
            "--registry",
            "localhost:1",
            "--network",
            "host",
            "--push",
            "--no-record",
        ],
    )
    try:
        assert result.exit_code == 1
        assert "push of localhost:1/envbuild-test/push:1 failed" in result.output
        assert "connection refused" in result.output and "docker login" in result.output
        docker_engine.images.get("localhost:1/envbuild-test/push:1")  # built and kept locally
    finally:
        docker_engine.images.remove("localhost:1/envbuild-test/push:1", force=True)


def test_inline_cache_export_and_import(tmp_path, local_base, docker_engine):
    ctx = context(tmp_path, f"FROM {local_base}\nRUN echo cache-me > /c\n")
    try:
        first = build_image(
            ctx,
            "envbuild-test/cache:1",
            BuildOptions(network="host", force=True, cache_to=("type=inline",)),
            manifest=read_manifest(ctx),
        )
        assert "exporting cache" in first.log_path.read_text()
        second = build_image(
            ctx,
            "envbuild-test/cache:2",
            BuildOptions(network="host", force=True, cache_from=("envbuild-test/cache:1",)),
            manifest=read_manifest(ctx),
        )
        assert "importing cache manifest from envbuild-test/cache:1" in second.log_path.read_text()
    finally:
        for tag in ("envbuild-test/cache:1", "envbuild-test/cache:2"):
            docker_engine.images.remove(tag, force=True)
