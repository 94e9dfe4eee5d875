"""What `envbuild render` tells a user about the stacks built by TheRock (ROCm 7.14, 7.14.1, 10.0, 10.1): who built
the torch it installs, the one default-arch rule, and an arch's development status and public records on the release.
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from builder.cli import main


def render(tmp_path, *args):
    out = tmp_path / "ctx"
    result = CliRunner().invoke(main, ["render", *args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    return result, out


def words(text: str) -> str:
    """The text with its line breaks and table borders folded to single spaces (rich and textwrap break lines)."""
    return " ".join(text.replace("│", " ").split())


def test_mi250x_on_rocm_7_14_says_its_status_and_the_failure_record(tmp_path):
    """`render --rocm 7.14 --torch 2.14 --arch MI250X` still renders (exit 0), and its notice on stderr says that
    gfx90a is only "Build Passing" in TheRock and cites the failure record of MI250 on 7.14 (ROCm/pytorch#3518)."""
    result, out = render(tmp_path, "--rocm", "7.14", "--torch", "2.14", "--arch", "MI250X")
    notice = words(result.stderr)
    assert "rocm7.14-torch2.14-gfx90a-py3.12: what the public record says about gfx90a (MI210, MI250, MI250X)" in notice
    assert 'gfx90a is "Build Passing" in TheRock, which built ROCm 7.14' in notice
    assert '"does not imply the runtime is functional"' in notice
    assert "SUPPORTED_GPUS.md @418cd5f63abb7a604bad5874cd7b2e29334e640f (the 7.14.0 release commit)" in notice
    assert "hipErrorInvalidImage" in notice and "ROCm/pytorch#3518" in notice and "ROCm/TheRock#7081" in notice
    assert (out / "Dockerfile").is_file() and (out / "cell.def").is_file()


def test_a_release_ready_arch_gets_no_arch_notice_and_a_sanity_tested_one_says_so(tmp_path):
    ready, _ = render(tmp_path / "a", "--rocm", "7.14", "--torch", "2.14", "--arch", "gfx942")
    assert "public record says about" not in ready.stderr and "TheRock" not in ready.stderr
    tested, _ = render(tmp_path / "b", "--rocm", "7.14", "--torch", "2.14", "--arch", "gfx1100")
    assert 'gfx1100 is "Sanity-Tested" in TheRock' in words(tested.stderr)
    same, _ = render(tmp_path / "c", "--rocm", "10.1", "--torch", "2.14", "--arch", "gfx1100")  # Release-Ready there
    assert "public record says about" not in same.stderr


def test_rocm_10_1_on_gfx90a_takes_amds_torch_and_says_whose_build_it_is(tmp_path):
    """`render --rocm 10.1 --torch 2.14 --arch gfx90a`: torch 2.14.0+rocm10.1.0 and the gfx90a device packages from
    AMD's index, labelled AMD's build everywhere (plan, image labels, manifest), never "PyTorch's own build"."""
    result, out = render(tmp_path, "--rocm", "10.1", "--torch", "2.14", "--arch", "gfx90a")
    shown = words(result.output)
    assert "PyTorch's own build" not in shown and "official wheel from" not in shown
    assert "torch==2.14.0+rocm10.1.0 (wheel: AMD's own wheel (rocm10.1.0) from AMD's index" in shown
    assert "vendor wheel: AMD's own build of this torch, from AMD's index (not PyTorch's)" in shown
    assert "torch from: torch==2.14.0+rocm10.1.0 from https://stable.repo.amd.com/rocm/whl-next/" in shown
    assert "without them a TheRock torch without its arch's amd-torch-device package reports a GPU" in shown
    assert "hipErrorInvalidImage (astral-sh/uv#21683" in shown
    assert 'gfx90a is "Build Passing" in TheRock, which built ROCm 10.1' in words(result.stderr)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["labels"]["io.envbuild.evidence"].startswith("vendor wheel: AMD's own build")
    for name in ("Dockerfile", "cell.def"):
        text = (out / name).read_text()
        assert "rocm[libraries,device-gfx90a]==10.1.0 amd-torch-device-gfx90a==2.14.0+rocm10.1.0" in text, name
        assert "https://stable.repo.amd.com/rocm/whl-next/" in text and "PyTorch's own build" not in text, name


def test_rocm_7_14_1_takes_amds_torch_2_11_from_amds_multi_arch_index(tmp_path):
    result, out = render(tmp_path, "--rocm", "7.14.1", "--arch", "gfx90a")
    assert "--torch not given: torch 2.11, the newest line with AMD's wheel for ROCm 7.14.1" in words(result.stderr)
    for name in ("Dockerfile", "cell.def"):
        text = (out / name).read_text()
        assert "rocm[libraries,device-gfx90a]==7.14.1 amd-torch-device-gfx90a==2.11.0+rocm7.14.1" in text, name
        assert "https://repo.amd.com/rocm/whl-multi-arch/" in text, name
    notice = words(result.stderr)
    assert 'gfx90a is "Build Passing" in TheRock, which built ROCm 7.14.1' in notice
    assert "AMD's torch 2.11.0, the one this release's cells take, works" in notice


def test_the_default_arch_is_one_rule_and_the_notice_says_it(tmp_path):
    """Without --arch every ROCm release takes gfx90a (recipes/flavors.toml default_arch), 6.x and 10.x alike, and
    says so; with --arch nothing is said about a default."""
    for i, args in enumerate((["--rocm", "6.2", "--torch", "2.5"], ["--rocm", "7.2"], ["--rocm", "10.1"])):
        result, out = render(tmp_path / str(i), *args)
        assert "--arch not given: gfx90a (MI210, MI250, MI250X), the default on every ROCm release" in words(
            result.stderr
        ), args
        assert json.loads((out / "manifest.json").read_text())["cell"]["arch"] == "gfx90a", args
    given, _ = render(tmp_path / "given", "--rocm", "10.1", "--arch", "gfx942")
    assert "--arch not given" not in given.stderr


def test_recipes_list_names_amds_wheels_as_amds():
    result = CliRunner().invoke(main, ["recipes", "list", "--json", "--flavor", "rocm"])
    assert result.exit_code == 0, result.output
    proof = {(r["accel_version"], r["proof"]) for r in json.loads(result.output) if r["torch_source"] == "wheel"}
    assert {("7.14.1", "AMD's wheel"), ("10.0", "AMD's wheel"), ("10.1", "AMD's wheel")} <= proof
    assert ("7.14", "official wheel") in proof and not {p for v, p in proof if v in ("7.14.1", "10.0", "10.1")} - {
        "AMD's wheel"
    }
