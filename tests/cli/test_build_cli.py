"""`envbuild image` without an engine: --dry-run plans (ROCm cells included) and bad requests."""

from __future__ import annotations

from click.testing import CliRunner

from builder.cli import main


def test_dry_run_of_a_rocm_source_build(tmp_path):
    out = tmp_path / "ctx"
    result = CliRunner().invoke(
        main, ["image", "--rocm", "6.2", "--torch", "2.4", "--unproven", "-o", str(out), "--dry-run"]
    )
    assert result.exit_code == 0, result.output
    assert "rocm6.2-torch2.4-gfx90a" in result.output
    assert "torch-source" in result.output.split("stages:")[1]  # no official 2.4 wheel for ROCm 6.2
    assert f"Dockerfile: {(out / 'Dockerfile').resolve()}" in result.output
    tag_line = next(line for line in result.output.splitlines() if line.startswith("image tag:"))
    assert tag_line.split()[-1].startswith("envbuild/rocm6.2-torch2.4-gfx90a")
    assert (out / "Dockerfile").is_file() and not (tmp_path / "ctx.build.log").exists()


def test_dry_run_of_a_rendered_context(tmp_path):
    out = tmp_path / "ctx"
    CliRunner().invoke(main, ["render", "--flavor", "cpu", "--torch", "2.13", "-o", str(out)])
    result = CliRunner().invoke(main, ["image", "--context", str(out), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "image tag:  envbuild/cpu-torch2.13-py3.11:" in result.output and '"flavor": "cpu"' in result.output


def test_bad_requests_exit_2(tmp_path):
    runner = CliRunner()
    unknown = runner.invoke(main, ["image", "--rocm", "9.9", "--torch", "2.4", "--dry-run", "-o", str(tmp_path / "a")])
    assert unknown.exit_code == 2 and "9.9" in unknown.output
    nothing = runner.invoke(main, ["image"])
    assert nothing.exit_code == 2 and "--context" in nothing.output
    empty = tmp_path / "empty"
    empty.mkdir()
    no_dockerfile = runner.invoke(main, ["image", "--context", str(empty)])
    assert no_dockerfile.exit_code == 2 and "no Dockerfile" in no_dockerfile.output
    both = runner.invoke(main, ["image", "--context", str(empty), "--torch", "2.13"])
    assert both.exit_code == 2 and "drop the request flags" in both.output
    no_ca = runner.invoke(main, ["image", "--context", str(empty), "--ca-cert", str(tmp_path / "ca.pem")])
    assert no_ca.exit_code == 2 and "ca.pem" in no_ca.output
