"""A source build's compile jobs are sized from the engine's memory with the flavor's per-job figure and passed as
the MAX_JOBS build argument: the context (and its hash, the image tag) is the same on every machine."""

from __future__ import annotations

import pytest

from builder.engine.build import BuildOptions, build_command
from builder.engine.build_host import EngineResources
from builder.engine.docker import BuildTool
from builder.plan.recipes import load
from builder.plan.render import render
from builder.plan.resolve import Request, resolve
from builder.workflows import build as workflow

GIB = 2**30


@pytest.mark.parametrize(
    "memory_gib, cpus, jobs",
    [
        (24, 2, 2),  # this machine: the CPUs bound it
        (24, 16, 4),  # 24 GiB / 4.5 GiB = 5, one held back
        (64, 128, 13),  # an MI250X node's share of memory bounds it
        (512, 128, 112),
        (512, 64, 64),
        (8, 16, 1),  # 8 GiB: one job (never none)
        (2, 4, 1),
    ],
)
def test_jobs_are_the_cpus_or_the_memory_per_job_less_one(memory_gib, cpus, jobs):
    assert workflow.jobs_for(memory_gib * GIB, cpus, 4608) == jobs


@pytest.fixture(scope="module")
def source_context(tmp_path_factory):
    plan = resolve(Request(accel_version="6.2", torch="2.4"))
    assert plan.torch_source == "source"
    out = tmp_path_factory.mktemp("source") / "ctx"
    render(plan, out)
    return workflow.existing(out), plan


def test_a_source_context_gets_max_jobs_from_its_flavors_per_job_figure(source_context):
    context, plan = source_context
    per_job = load().flavors["rocm"].compile_job_mem_mb
    assert context.manifest["compile_job_mem_mb"] == per_job == 4608  # recipes/flavors.toml, pytorch#124018
    jobs = workflow.compile_jobs(context, EngineResources(64 * GIB, 32))
    assert (jobs.max_jobs, jobs.per_job_mb) == (13, 4608)
    assert jobs.reason == "min(32 CPUs, 64.0 GiB / 4608 MB per job - 1 held back) = 13"
    assert jobs.as_record()["engine_memory_bytes"] == 64 * GIB


def test_a_wheel_context_compiles_no_torch_and_asks_the_engine_nothing(tmp_path, monkeypatch):
    out = tmp_path / "ctx"
    render(resolve(Request(flavor="cpu", torch="2.13")), out)

    def no_engine():
        raise AssertionError("a wheel build must not ask the engine for its memory")

    monkeypatch.setattr(workflow, "engine_resources", no_engine)
    assert workflow.compile_jobs(workflow.existing(out)) is None
    options = BuildOptions(network="host")
    assert workflow.with_compile_jobs(options, None) is options


def test_max_jobs_is_a_build_argument_that_leaves_the_context_and_its_hash_alone(source_context, tmp_path):
    """The Dockerfile declares MAX_JOBS with an empty default; the build passes the chosen count on the command line.
    Rendering on another machine gives the same files and the same hash: the memory never enters the context."""
    context, plan = source_context
    dockerfile = (context.directory / "Dockerfile").read_text()
    assert "ARG MAX_JOBS=\n" in dockerfile and "ARG COMPILE_JOB_MEM_MB=4608\n" in dockerfile
    jobs = workflow.compile_jobs(context, EngineResources(24 * GIB, 16))
    options = workflow.with_compile_jobs(BuildOptions(build_args={"OTHER": "1"}), jobs)
    argv = build_command(
        BuildTool("/usr/bin/docker", "docker-build", ("docker", "build")), context.directory, "t", options, {}
    )
    assert ["--build-arg", "MAX_JOBS=4"] == argv[argv.index("MAX_JOBS=4") - 1 : argv.index("MAX_JOBS=4") + 1]
    assert "OTHER=1" in argv
    again = render(plan, tmp_path / "again")
    assert again.manifest["context_hash"] == context.manifest["context_hash"]
    assert (tmp_path / "again" / "Dockerfile").read_text() == dockerfile


def test_the_warning_says_when_less_is_free_now_than_the_jobs_may_need(source_context):
    context, _ = source_context
    jobs = workflow.compile_jobs(context, EngineResources(64 * GIB, 32))
    plenty = workflow.CompileJobs(jobs.max_jobs, jobs.per_job_mb, jobs.engine, 60 * GIB)
    short = workflow.CompileJobs(jobs.max_jobs, jobs.per_job_mb, jobs.engine, 8 * GIB)
    assert not plenty.short_of_memory and short.short_of_memory


def test_envbuild_image_says_how_many_jobs_it_chose_and_passes_them_to_the_build(tmp_path, monkeypatch):
    """The source notice is followed by the count chosen on the engine's machine, and that count is the MAX_JOBS build
    argument the build gets (the engine here: a stand-in saying 64 GiB and 32 CPUs; the build stops at once)."""
    from click.testing import CliRunner

    from builder.cli import main
    from builder.engine.docker import EngineUnavailable

    seen = {}

    def stand_in_build(context_dir, tag, options, notify, log_path, manifest=None):
        seen["args"] = dict(options.build_args)
        raise EngineUnavailable("stand-in engine: no build here")

    monkeypatch.setattr(workflow, "engine_resources", lambda: EngineResources(64 * GIB, 32))
    monkeypatch.setattr(workflow, "build_image", stand_in_build)
    out = CliRunner().invoke(
        main, ["image", "--rocm", "6.2", "--torch", "2.4", "-o", str(tmp_path / "ctx"), "--no-record"]
    )
    assert out.exit_code == 2 and "stand-in engine" in out.output, out.output
    assert "compile jobs: MAX_JOBS=13 (min(32 CPUs, 64.0 GiB / 4608 MB per job - 1 held back) = 13" in out.stderr
    assert out.stderr.index("builds from source here") < out.stderr.index("compile jobs: MAX_JOBS=13")
    assert seen["args"] == {"MAX_JOBS": "13"}
