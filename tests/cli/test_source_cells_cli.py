"""Source cells through the real CLI: they build by default with a short notice on stderr, record their commit and
evidence step, and `--proven-only` refuses them (exit 2, nothing written)."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.plan.resolve import all_plans

# what the notice may take: the request, not the module constant (12 lines, and two more since it also says what is
# patched and how the base and the OS packages are pinned)
WIDTH, MAX_LINES = 160, 14

HEADLINE = ["--rocm", "6.2", "--torch", "2.4", "--arch", "gfx90a"]
STEP = "source build, not yet proven: the first passing build is the proof"
SOURCE_CELLS = sorted({(p.release.version, p.torch.line) for p in all_plans(flavor="rocm") if p.unproven})


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def _notice(stderr: str) -> list[str]:
    """The notice's lines: from the line naming the cell to the evidence line."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if "builds from source here" in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("Evidence: "))
    return lines[start : end + 1]


def test_the_headline_cell_renders_with_no_flag_and_says_its_record_cost_and_neighbours(tmp_path):
    result = invoke("render", *HEADLINE, "-o", str(tmp_path / "ctx"))
    assert result.exit_code == 0, result.output
    notice = _notice(result.stderr)
    assert len(notice) <= MAX_LINES and max(map(len, notice)) <= WIDTH
    text = " ".join(" ".join(notice).split())
    assert "Usage:" not in result.stderr and "Error" not in result.stderr
    # the commit built is the wheel's, never called the tag's; the tag's commit is named beside it
    assert "v2.4.1 @ 38b96d33" not in text
    assert "pytorch/pytorch @ 38b96d3399a6 (v2.4.1's wheel commit; the tag v2.4.1 is ee1b6804381c)" in text
    assert (  # the patch series, each entry with the fix it carries and where it comes from
        "Patches (recipes/patches/torch-2.4/series): caffe2-2.4.0-exclude-aotriton.patch for pytorch/pytorch#130197 "
        "(gentoo/gentoo@7354afd9, sha256 268399a88ccb)" in text
    )
    assert (
        "Pins: base by tag only (no digest published); ROCm 6.2 apt build 60200-66~22.04: 1 exact, 7 at that build, "
        "libopenblas-dev unpinned" in text
    )
    for source in ("ROCm/ROCm@e396b48", "ROCm/pytorch#1537", "spack/spack-packages@000faf0"):  # the public record
        assert source in text
    assert "names no failure" in text  # Spack's conflict is cited, not taken as a failure
    assert "pytorch/builder#1286" in text and "4.5 GB RAM per compile job (pytorch#124018)" in text  # the cost
    assert "Nearest proven: --rocm 6.1.2 --torch 2.4 (official wheel); --rocm 6.2 --torch 2.5 (official wheel)" in text
    assert STEP in text
    manifest = json.loads((tmp_path / "ctx" / "manifest.json").read_text())
    assert re.fullmatch(r"[0-9a-f]{40}", manifest["torch"]["git"]["commit"])
    git = manifest["torch"]["git"]
    assert (git["commit"], git["ref"]) == ("38b96d3399a695e704ed39b60dac733c3fbf20e2", "v2.4.1")
    assert git["tag_commit"] == "ee1b6804381c57161c477caa380a840a84167676" and "torch/version.py" in git["checked"]
    assert manifest["labels"]["io.envbuild.torch-git-tag"] == "v2.4.1@ee1b6804381c57161c477caa380a840a84167676"
    (patch,) = manifest["patches"]
    assert (
        patch["kind"] == "url" and patch["sha256"] == "268399a88ccb0a8e297162dda2e292f0df93240749455cbbf2b3d44f60a0bdfb"
    )
    assert patch["ref"].startswith(
        "https://raw.githubusercontent.com/gentoo/gentoo/7354afd9d872a15c6bdf1ee831db7f7f131fca01/"
    )
    pins = manifest["apt_pin"]
    assert pins["build"] == "60200-66~22.04" and pins["exact"] == {"rocm-llvm-dev": "18.0.0.24292.60200-66~22.04"}
    assert pins["unpinned"] == ["libopenblas-dev"] and "openxla/xla@3ee71f3" in pins["checked"]
    assert "rocm/pytorch and rocm/tensorflow tags only" in manifest["base_image_checked"]
    assert manifest["evidence"]["step"] == manifest["labels"]["io.envbuild.evidence"] == STEP
    sources = [r["source"] for r in manifest["evidence"]["record"]]
    assert sources[:1] == ["ROCm/ROCm@e396b48 compatibility-matrix-historical-6.0.csv"]
    assert manifest["base_image_pin"] == "tag only" and manifest["torch"]["wheel_hashes"] is None
    dockerfile = (tmp_path / "ctx" / "Dockerfile").read_text()
    assert "ARG TORCH_GIT_COMMIT=38b96d3399a695e704ed39b60dac733c3fbf20e2\n" in dockerfile
    assert (
        " rocm-llvm-dev=18.0.0.24292.60200-66~22.04 " in dockerfile
        and 'ARG ROCM_APT_BUILD="60200-66~22.04"' in dockerfile
    )


def test_unproven_is_accepted_and_changes_nothing(tmp_path):
    plain = invoke("render", *HEADLINE, "-o", str(tmp_path / "a"))
    flagged = invoke("render", *HEADLINE, "--unproven", "-o", str(tmp_path / "b"))
    assert plain.exit_code == flagged.exit_code == 0, flagged.output
    assert (tmp_path / "a" / "manifest.json").read_text() == (tmp_path / "b" / "manifest.json").read_text()


@pytest.mark.parametrize("command", [["render", "-o", "OUT"], ["image", "--dry-run", "-o", "OUT"]])
def test_proven_only_refuses_a_source_cell_with_the_same_notice_and_writes_nothing(command, tmp_path):
    out = tmp_path / "ctx"
    args = [str(out) if a == "OUT" else a for a in command]
    result = invoke(*args, *HEADLINE, "--proven-only")
    assert result.exit_code == 2, result.output
    notice = _notice(result.stderr)
    assert len(notice) <= MAX_LINES and max(map(len, notice)) <= WIDTH and "ROCm/pytorch#1537" in " ".join(notice)
    assert "Usage:" not in result.stderr and f"{STEP} (--proven-only refuses it)" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_proven_only_takes_a_wheel_cell(tmp_path):
    result = invoke("render", "--rocm", "6.2", "--torch", "2.5", "--proven-only", "-o", str(tmp_path / "ctx"))
    assert result.exit_code == 0, result.output
    assert "builds from source" not in result.stderr
    manifest = json.loads((tmp_path / "ctx" / "manifest.json").read_text())
    assert manifest["torch"]["wheel_hashes"] == "unhashed" and manifest["base_image_pin"] == "tag only"
    assert manifest["evidence"] == {
        "step": "official wheel: PyTorch's own build of this torch, from its index",
        "record": [],
    }


def test_image_dry_run_plans_the_headline_cell_with_no_flag():
    result = invoke("image", *HEADLINE, "--dry-run")
    assert result.exit_code == 0, result.output
    notice = _notice(result.stderr)
    assert len(notice) <= MAX_LINES and max(map(len, notice)) <= WIDTH
    assert "image tag:  envbuild/rocm6.2-torch2.4-gfx90a-py3.10:" in result.stdout
    assert "context:    not written" in result.stdout


@pytest.mark.parametrize("rocm, line", SOURCE_CELLS)
def test_every_source_cell_notice_fits_and_cites_a_source_for_each_statement(rocm, line):
    result = invoke("image", "--rocm", rocm, "--torch", line, "--dry-run")
    assert result.exit_code == 0, result.output
    notice = _notice(result.stderr)
    assert len(notice) <= MAX_LINES and max(map(len, notice)) <= WIDTH
    records = " ".join(line for line in notice if line.startswith(("  - ", "    "))).split("  - ")[1:]  # rejoined
    assert records and all(r.rstrip().endswith(")") for r in records), records  # each ends with its source


def test_a_minor_rocm_release_means_its_newest_patch_release_and_says_so(tmp_path):
    result = invoke("render", "--rocm", "6.1", "--torch", "2.4", "-o", str(tmp_path / "ctx"))
    assert result.exit_code == 0, result.output
    assert "--rocm 6.1 means ROCm 6.1.2, the newest 6.1 release envbuild knows" in result.stderr
    assert json.loads((tmp_path / "ctx" / "manifest.json").read_text())["accel_version"] == "6.1.2"
    exact = invoke("render", "--rocm", "6.2", "--torch", "2.5", "-o", str(tmp_path / "exact"))
    assert exact.exit_code == 0 and "means" not in exact.stderr  # an exact release is taken as given
    assert invoke("render", "--rocm", "6.5", "--torch", "2.4", "-o", str(tmp_path / "x")).exit_code == 2


def test_torch_may_be_omitted_and_the_newest_line_with_a_wheel_is_echoed(tmp_path):
    result = invoke("render", "--rocm", "6.2", "-o", str(tmp_path / "ctx"))
    assert result.exit_code == 0, result.output
    assert "--torch not given: torch 2.5, the newest line with an official wheel for ROCm 6.2" in result.stderr
    assert json.loads((tmp_path / "ctx" / "manifest.json").read_text())["cell"]["torch"] == "2.5"
    dry = invoke("image", "--flavor", "cpu", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "--torch not given: torch 2.13" in dry.stderr
