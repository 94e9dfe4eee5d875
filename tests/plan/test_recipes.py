"""recipes/ data rules, series parsing, and the resolver's choices."""

from __future__ import annotations

import shutil

import pytest

from builder.plan.recipes import RecipeError, load, version_key
from builder.plan.resolve import KnownFailureError, Request, ResolveError, UnprovenSourceError, all_plans, resolve


def test_every_release_and_torch_line_cites_a_source():
    recipes = load()
    for flavor, releases in recipes.releases.items():
        assert releases, flavor
        for release in releases.values():
            assert release.source and release.base_image
    for line in recipes.torch.values():
        assert line.source and line.version.startswith(line.line + ".")


def test_rocm_releases_match_the_verified_facts():
    rocm = load().releases["rocm"]
    assert set(rocm) >= {"6.1.2", "6.2"}
    assert rocm["6.1.2"].amdgpu_install == "6.1.60102" and rocm["6.2"].amdgpu_install == "6.2.60200"
    assert rocm["6.2"].base_image == "rocm/dev-ubuntu-22.04:6.2" and rocm["6.2"].codename == "jammy"
    for version in ("6.1.2", "6.2"):
        assert set(rocm[version].archs) == {"gfx942", "gfx90a", "gfx908", "gfx1100", "gfx1030"}


def test_later_releases_take_os_and_archs_from_amds_tables():
    """6.2.4 and later: the archs and the Ubuntu line are AMD's machine-readable tables' (recipes/vendor/), for the
    first point release of the line, and the release's source names the table it came from."""
    from builder.plan import vendor_matrix

    points = vendor_matrix.load()
    later = {v: r for v, r in load().releases["rocm"].items() if version_key(v) > (6, 2) and r.pip_accel is None}
    assert set(later) >= {"6.2.4", "6.3", "6.4", "7.0", "7.1", "7.2"}
    for version, release in later.items():
        first = vendor_matrix.for_release(version, points)[0]
        assert set(release.archs) == set(first.archs), version
        assert any(u.startswith(release.ubuntu) for u in first.ubuntu), version
        assert "compatibility-matrix" in release.source, version
        assert not release.source_build and not release.source_build_packages, version  # none verified there
    assert "gfx950" in later["7.0"].archs and "gfx950" not in later["6.4"].archs
    assert {"gfx1101", "gfx1200", "gfx1201"} <= set(later["7.2"].archs)


def test_pip_rocm_releases_are_a_plain_ubuntu_with_one_archs_wheels():
    """7.14 and 10.0: ROCm as Python wheels on ubuntu:24.04, archs from TheRock's device-extra table (gfx950, the
    Strix gfx1150/gfx1151 and RDNA4 gfx1200/gfx1201 included), requirements that name {arch}, never device-all."""
    rocm = load().releases["rocm"]
    for version in ("7.14", "10.0"):
        release = rocm[version]
        assert release.base_image == "ubuntu:24.04" and release.system_python == "3.12", version
        assert {"gfx942", "gfx950", "gfx1150", "gfx1151", "gfx1200", "gfx1201"} <= set(release.archs), version
        assert "TheRock RELEASES.md@89553ce" in release.source and not release.source_build, version
        accel = release.pip_accel
        assert accel is not None and all("{arch}" in r for r in accel.requirements[:1]), version
        assert "rocm-sdk-device-{arch}" in accel.device_packages and accel.hip_version == "", version
    assert rocm["7.14"].wheel_index == "" and rocm["10.0"].wheel_index == "https://stable.repo.amd.com/rocm/whl-next/"


def test_a_pip_rocm_release_that_asks_for_device_all_is_refused(tmp_path):
    root = tmp_path / "recipes"
    shutil.copytree(load().root, root)
    text = (root / "rocm.toml").read_text()
    (root / "rocm.toml").write_text(
        text.replace(
            'requirements = ["rocm[libraries,device-{arch}]==7.14.0"]',
            'requirements = ["rocm[libraries,device-all]==7.14.0"]',
        )
    )
    load.cache_clear()
    with pytest.raises(RecipeError, match="never device-all"):
        load(root)


def test_hf_stack_never_pairs_transformers_5_with_old_torch_or_python():
    """transformers 5.x needs torch >= 2.6 and Python >= 3.11 (transformers 5.x on PyPI: Requires-Python >=3.11,
    torch>=2.6): check every cell's pins."""
    for plan in all_plans():
        major = int(plan.stack["transformers"].split(".")[0])
        if major >= 5:
            assert version_key(plan.torch.line) >= (2, 6), plan.cell.key
            assert version_key(plan.cell.python) >= (3, 11), plan.cell.key
        if plan.stack["accelerate"].startswith("0.33"):  # accelerate 0.33 requires numpy < 2
            assert plan.stack["numpy"].startswith("1."), plan.cell.key


def test_auto_route_per_official_wheel_table():
    cases = {
        ("6.2", "2.5"): ("wheel", "torch==2.5.1+rocm6.2"),
        ("6.1.2", "2.4"): ("wheel", "torch==2.4.1+rocm6.1"),
        ("6.1.2", "2.5"): ("wheel", "torch==2.5.1+rocm6.1"),
        ("6.2", "2.4"): ("source", "torch==2.4.1+rocm6.2"),  # a source build stamps its local label
        ("6.1.2", "2.3"): ("source", "torch==2.3.1+rocm6.1.2"),
        ("6.2", "2.6"): ("source", "torch==2.6.0+rocm6.2"),  # 2.6.0's wheel is rocm6.2.4, not 6.2
    }
    for (rocm, torch), (route, requirement) in cases.items():
        plan = resolve(Request(accel_version=rocm, torch=torch))
        assert (plan.torch_source, plan.torch_requirement) == (route, requirement), (rocm, torch)
        assert ("auto chose a source build" in plan.torch_source_reason) == (route == "source")
        assert plan.unproven == (route == "source")  # recipes/source-builds.toml lists no peer build yet
        if route == "source":  # built by default; --proven-only refuses it
            with pytest.raises(UnprovenSourceError, match=r"not yet proven: the first passing build is the proof"):
                resolve(Request(accel_version=rocm, torch=torch, proven_only=True))


def test_defaults_and_exact_release_request():
    plan = resolve(Request(accel_version="6.2", torch="2.4.1"))
    assert plan.cell.key == "rocm6.2-torch2.4-gfx90a-py3.10"
    assert plan.base_image == "rocm/dev-ubuntu-22.04:6.2" and plan.amdgpu_install == ""


def test_forced_source_build_where_a_wheel_exists():
    with pytest.raises(UnprovenSourceError, match="not yet proven"):
        resolve(Request(accel_version="6.2", torch="2.5", torch_source="source", proven_only=True))
    plan = resolve(Request(accel_version="6.2", torch="2.5", torch_source="source"))
    assert plan.torch_source == "source" and plan.torch_stage == "torch-compile"
    assert plan.stages == (
        "base",
        "torch-src",
        "torch-source-build",
        "torch-source",
        "torch-compile",
        "sentencepiece",
        "runtime",
    )
    assert plan.torch_version == "2.5.1+rocm6.2"  # the local label a source build stamps, as the wheel has
    assert plan.os_packages and "rocm-libs" in plan.os_packages
    # v2.5.1's Triton: what the official 2.5.1+rocm6.2 wheel requires (recipes/torch.toml)
    assert plan.compile_requirement == "pytorch-triton-rocm==3.1.0" and not plan.compile_unavailable
    assert plan.wheel_index_url == "https://download.pytorch.org/whl/rocm6.2"


def test_install_rocm_starts_from_ubuntu_with_the_exact_amdgpu_install():
    plan = resolve(Request(accel_version="6.1.2", torch="2.3", install_accel=True))
    assert plan.base_image == "ubuntu:22.04" and plan.amdgpu_install == "6.1.60102"
    with pytest.raises(ResolveError, match="no installer route"):
        resolve(Request(flavor="cpu", torch="2.13", install_accel=True))


def test_every_known_cell_resolves_back_to_itself():
    proven = all_plans(proven_only=True)
    plans = all_plans()
    assert {p.cell.key for p in proven} == {p.cell.key for p in plans if not p.unproven} < {p.cell.key for p in plans}
    keys = [p.cell.key for p in plans]
    assert len(keys) == len(set(keys))
    for plan in plans:
        cell = plan.cell
        again = resolve(
            Request(
                flavor=cell.flavor,
                accel_version=cell.accel_version,
                torch=cell.torch,
                arch=cell.arch,
                python=cell.python,
            )
        )
        assert again == plan


PATCH = """From: envbuild
Subject: example

Why: shows the header a patch needs.
Upstream: https://github.com/pytorch/pytorch/pull/1

diff --git a/a.txt b/a.txt
"""


def test_series_with_patches_and_commits_is_parsed_with_hashes(recipes_copy):
    series_dir = recipes_copy / "patches" / "torch-2.4"
    (series_dir / "0001-example.patch").write_text(PATCH)
    sha = "0123456789abcdef0123456789abcdef01234567"
    (series_dir / "series").write_text(
        f"# comment\npatch 0001-example.patch\ncommit {sha} https://github.com/pytorch/pytorch/pull/2#x  # why\n"
    )
    entries = load(recipes_copy).patch_series("2.4")
    assert [(e.kind, e.ref) for e in entries] == [("patch", "0001-example.patch"), ("commit", sha)]
    assert len(entries[0].sha256) == 64 and entries[1].url == "https://github.com/pytorch/pytorch/pull/2#x"
    assert entries[1].note == "why" and entries[0].note == ""


def test_a_published_patch_entry_keeps_its_url_sha256_upstream_link_and_reason(recipes_copy):
    sha = "0123456789abcdef0123456789abcdef01234567"
    url = f"https://raw.githubusercontent.com/gentoo/gentoo/{sha}/sci-libs/caffe2/files/x-1.0-fix.patch"
    digest = "ab" * 32
    (recipes_copy / "patches" / "torch-2.4" / "series").write_text(
        f"url {url} sha256:{digest} https://github.com/pytorch/pytorch/pull/7  # fixes\tthe build\n"
    )
    (entry,) = load(recipes_copy).patch_series("2.4")
    assert (entry.kind, entry.ref, entry.sha256, entry.url) == (
        "url",
        url,
        digest,
        "https://github.com/pytorch/pytorch/pull/7",
    )
    assert entry.note == "fixes the build" and entry.name == "x-1.0-fix.patch"


def test_the_shipped_series_carry_gentoos_aotriton_backports_at_pinned_commits():
    """The 2.3 and 2.4 lines build with both attention flags off, which their cmake does not honour without the
    backport of pytorch#130197 (recipes/patches/torch-2.4/series says why and how it was verified)."""
    recipes = load()
    for line, commit, name, digest in (
        (
            "2.4",
            "7354afd9d872a15c6bdf1ee831db7f7f131fca01",
            "caffe2-2.4.0-exclude-aotriton.patch",
            "268399a88ccb0a8e297162dda2e292f0df93240749455cbbf2b3d44f60a0bdfb",
        ),
        (
            "2.3",
            "b5e98d9032664165cef31ca6a3fedbf38e7c11fc",
            "caffe2-2.3.0-exclude-aotriton.patch",
            "774adeec8345ee1a6db2fafedbe3862d4788c0bdb87e6b1463524aa14650c553",
        ),
    ):
        (entry,) = recipes.patch_series(line)
        assert entry.ref == f"https://raw.githubusercontent.com/gentoo/gentoo/{commit}/sci-libs/caffe2/files/{name}"
        assert (entry.kind, entry.sha256, entry.url) == (
            "url",
            digest,
            "https://github.com/pytorch/pytorch/pull/130197",
        )
    assert recipes.patch_series("2.6") == []


@pytest.mark.parametrize(
    "series, patch, message",
    [
        ("patch 0001-missing.patch\n", None, "does not exist"),
        ("patch 0001-example.patch\n", "diff --git a/a b/a\n", "needs 'Why:' and 'Upstream:'"),
        ("commit abc123 https://x\n", None, "series:1: expected"),
        ("cherry-pick 0001-example.patch\n", PATCH, "series:1: expected"),
    ],
)
def test_bad_series_is_rejected_with_file_and_line(recipes_copy, series, patch, message):
    series_dir = recipes_copy / "patches" / "torch-2.4"
    if patch is not None:
        (series_dir / "0001-example.patch").write_text(patch)
    (series_dir / "series").write_text(series)
    with pytest.raises(RecipeError, match=message):
        load(recipes_copy)


def test_hf_stack_missing_for_a_torch_line_is_a_recipe_error(recipes_copy):
    text = (recipes_copy / "hf-stack.toml").read_text()
    (recipes_copy / "hf-stack.toml").write_text(text.replace('[stack."2.6"]', '[stack."2.6-gone"]'))
    with pytest.raises(RecipeError, match='no \\[stack."2.6"\\]'):
        load(recipes_copy)


CUDA_FLAVOR = """
[flavor.cuda]
description = "test-only flavor added as data"
releases_file = "cuda.toml"
label = "CUDA"
versioned = true
torch_sources = ["wheel", "source"]
wheel_index = "https://download.pytorch.org/whl/{suffix}"
local_version = "{suffix}"
arch_env = "TORCH_CUDA_ARCH_LIST"
build_env = { USE_CUDA = "1", USE_ROCM = "0" }
source_prepare = ""
compile_job_mem_mb = 4608
default_arch = "sm_90"
"""
CUDA_RELEASES = """
[release."12.4"]
base_image = "example.invalid/cuda-devel:12.4-ubuntu22.04"
codename = "jammy"
archs = ["sm_80", "sm_90"]
wheel_suffixes = ["cu124"]
system_python = "3.10"
pythons = ["3.10"]
source = "test data, not a verified fact"
"""


def test_a_new_flavor_is_data_not_code(recipes_copy, tmp_path):
    """Adding a flavor touches recipes/ only: it resolves, renders and lints without Python changes."""
    from builder.plan.render import context_files

    shutil.rmtree(recipes_copy / "flavors.d")  # the real cuda flavor; this test adds its own, test-only one
    (recipes_copy / "flavors.toml").write_text((recipes_copy / "flavors.toml").read_text() + CUDA_FLAVOR)
    (recipes_copy / "cuda.toml").write_text(CUDA_RELEASES)
    torch = (recipes_copy / "torch.toml").read_text()
    (recipes_copy / "torch.toml").write_text(
        torch.replace('[torch."2.5"]\nflavors = ["rocm"]', '[torch."2.5"]\nflavors = ["rocm", "cuda"]').replace(
            'wheel_suffixes = ["rocm6.1", "rocm6.2"]', 'wheel_suffixes = ["rocm6.1", "rocm6.2", "cu124"]'
        )
    )
    recipes = load(recipes_copy)
    wheel = resolve(Request(flavor="cuda", accel_version="12.4", torch="2.5"), recipes)
    assert wheel.cell.key == "cuda12.4-torch2.5-sm_90-py3.10"
    assert wheel.torch_requirement == "torch==2.5.1+cu124" and wheel.torch_source == "wheel"
    source = resolve(Request(flavor="cuda", accel_version="12.4", torch="2.5", torch_source="source"), recipes)
    dockerfile = context_files(wheel)[0]["Dockerfile"].decode()
    assert (
        "install_rocm" not in dockerfile and "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu124" in dockerfile
    )
    path = tmp_path / "Dockerfile"
    path.write_bytes(context_files(source)[0]["Dockerfile"])
    assert "ARG TORCH_CUDA_ARCH_LIST=sm_90" in path.read_text() and "USE_CUDA=1" in path.read_text()
    import subprocess

    from builder.paths import IMAGES_DIR

    lint = subprocess.run(
        ["hadolint", "--config", str(IMAGES_DIR / "hadolint.yaml"), str(path)], capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout
    with pytest.raises(ResolveError, match="arch 'gfx90a' is not supported by CUDA 12.4"):
        resolve(Request(flavor="cuda", accel_version="12.4", torch="2.5", arch="gfx90a"), recipes)


#: test data only (a placeholder, not a real pytorch commit): the shape of a peer-proven fork build
FORK_BUILD = """
[[build]]
flavor = "rocm"
release = "6.2"
torch = "2.4"
repo = "https://github.com/ROCm/pytorch.git"
ref = "release/2.4"
commit = "0123456789abcdef0123456789abcdef01234567"
version = "2.4.1"
peer = "https://example.org/peer-build-log"
checked = "test data"
"""


def test_a_peer_proven_fork_build_is_built_at_its_commit_and_recorded_as_fork(recipes_copy):
    """A source cell listed in source-builds.toml [[build]] builds that repository at that commit and says
    fork/upstream, the peer and the evidence step in the manifest and the labels."""
    from builder.plan.render import context_files

    path = recipes_copy / "source-builds.toml"
    path.write_text(path.read_text().replace("build = []\n", FORK_BUILD))
    recipes = load(recipes_copy)
    plan = resolve(Request(accel_version="6.2", torch="2.4"), recipes)
    assert not plan.unproven and plan.source_build.fork
    assert plan.git_source == {
        "repo": "https://github.com/ROCm/pytorch.git",
        "ref": "release/2.4",
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "fork": True,
        "proof": "peer-built",
        "peer": "https://example.org/peer-build-log",
        "checked": "test data",
    }
    files, manifest = context_files(plan)
    dockerfile = files["Dockerfile"].decode()
    assert "ARG TORCH_GIT_URL=https://github.com/ROCm/pytorch.git\n" in dockerfile
    assert "ARG TORCH_GIT_COMMIT=0123456789abcdef0123456789abcdef01234567\n" in dockerfile
    assert manifest["labels"]["io.envbuild.torch-git-origin"] == "fork"
    assert manifest["labels"]["io.envbuild.torch-proof"] == "https://example.org/peer-build-log"
    assert manifest["torch_origin"]["proof"] == "peer-built"
    assert manifest["evidence"]["step"] == manifest["labels"]["io.envbuild.evidence"] == recipes.steps.peer
    resolve(Request(accel_version="6.2", torch="2.4", proven_only=True), recipes)  # proven: --proven-only takes it
    from builder.plan.notice import source_notice

    notice = source_notice(plan, recipes)
    assert notice[0].endswith("ROCm/pytorch release/2.4 @ 0123456789abcdef0123456789abcdef01234567")
    assert notice[-1] == f"Evidence: {recipes.steps.peer} (manifest.json `evidence`)"  # no --proven-only warning
    # the same cell in the committed recipes: not proven, so --proven-only refuses it
    with pytest.raises(UnprovenSourceError):
        resolve(Request(accel_version="6.2", torch="2.4", proven_only=True))


@pytest.mark.parametrize(
    "bad, message",
    [
        (('commit = "0123456789abcdef0123456789abcdef01234567"', 'commit = "01234567"'), "full 40-hex sha"),
        (('version = "2.4.1"', 'version = "2.4.0"'), "torch.toml pins 2.4.1"),
        (('peer = "https://example.org/peer-build-log"', 'peer = "file:///etc/passwd"'), "https://"),
    ],
)
def test_a_source_build_entry_without_a_full_commit_peer_link_or_the_lines_version_is_refused(
    recipes_copy, bad, message
):
    path = recipes_copy / "source-builds.toml"
    path.write_text(path.read_text().replace("build = []\n", FORK_BUILD.replace(*bad)))
    with pytest.raises(RecipeError, match=message):
        load(recipes_copy)


def test_a_compile_pin_without_its_index_or_peer_record_is_refused(recipes_copy):
    """A Triton pin in torch.toml carries where it comes from: a version alone is not accepted."""
    text = (recipes_copy / "torch.toml").read_text()
    checked = next(line for line in text.splitlines() if line.startswith("compile_checked =") and "3.0.0" in line)
    (recipes_copy / "torch.toml").write_text(text.replace(checked + "\n", ""))
    with pytest.raises(RecipeError, match="torch line 2.4: compile_version needs compile_index and compile_checked"):
        load(recipes_copy)


def test_the_headline_source_cell_builds_a_verified_commit_and_says_it_is_not_yet_proven():
    """No public record names the commit of AMD's fork that its ROCm 6.2 CI passed (recipes/source-builds.toml says
    what was searched), so --rocm 6.2 --torch 2.4 builds upstream at the commit PyTorch's own 2.4.1 wheels record,
    says it is not yet proven, and gives the build estimate."""
    plan = resolve(Request(accel_version="6.2", torch="2.4", arch="gfx90a"))
    assert plan.unproven and plan.git_source["commit"] == "38b96d3399a695e704ed39b60dac733c3fbf20e2"
    assert plan.evidence_step == "source build, not yet proven: the first passing build is the proof"
    assert [r.source for r in plan.evidence][:3] == [
        "ROCm/ROCm@e396b48 compatibility-matrix-historical-6.0.csv",
        "ROCm/pytorch#1537, ROCm/pytorch#1691",
        "spack/spack-packages@000faf0 py_torch/package.py",
    ]
    rows = dict(plan.describe())
    assert rows["build size"].startswith("estimate") and "4.5 GB RAM per compile job" in rows["build size"]
    assert "build size" not in dict(resolve(Request(accel_version="6.2", torch="2.5")).describe())
    assert load().source_build("rocm", "6.2", "2.4") is None


@pytest.mark.parametrize(
    "line, version, commit",
    [
        ("2.3", "2.3.1", "d44533f9d073df13895333e70b66f81c513c1889"),
        ("2.4", "2.4.1", "38b96d3399a695e704ed39b60dac733c3fbf20e2"),
        ("2.6", "2.6.0", "2236df1770800ffea5697b11b0bb0d910b2e59e1"),
    ],
)
def test_every_source_line_is_pinned_to_the_commit_its_own_wheel_records(line, version, commit):
    """The commits were read from torch/version.py in PyPI's wheels (`checked` says which file and its sha256)."""
    pin = load().source_pin(line)
    assert (pin.version, pin.commit, pin.ref) == (version, commit, f"v{version}")
    assert f"torch-{version}-" in pin.checked and "sha256" in pin.checked


@pytest.mark.parametrize(
    "line, tag_commit",
    [
        ("2.3", "63d5e9221bedd1546b7d364b5ce4171547db12a9"),
        ("2.4", "ee1b6804381c57161c477caa380a840a84167676"),
        ("2.6", "1eba9b3aa3c43f86f4a2c807ac8e12c4a7767340"),
    ],
)
def test_every_source_line_records_the_tags_commit_too_and_the_plan_never_calls_the_built_one_the_tags(
    line, tag_commit
):
    """The tags point at other commits than the wheels record (Spack's package.py lists the tags' commits); both are
    recorded, and what the plan says names the built commit as the wheel's."""
    pin = load().source_pin(line)
    assert pin.tag_commit == tag_commit != pin.commit and "spack/spack-packages@000faf0" in pin.tag_checked
    rocm = "6.1.2" if line == "2.3" else "6.2"
    plan = resolve(Request(accel_version=rocm, torch=line, arch="gfx90a"))
    git = plan.pinned()["torch"]["git"]
    assert (git["commit"], git["tag_commit"]) == (pin.commit, tag_commit)
    source = dict(plan.describe())["torch source"]
    assert f"{pin.ref} @ {pin.commit}" not in source
    assert (
        f"@ {pin.commit}, the commit {pin.ref}'s own wheels record (the tag {pin.ref} points at {tag_commit})" in source
    )


@pytest.mark.parametrize(
    "bad, message",
    [
        (('commit = "38b96d3399a695e704ed39b60dac733c3fbf20e2"', 'commit = "38b96d33"'), "full 40-hex sha"),
        (
            ('version = "2.4.1"\nchecked = "git_version', 'version = "2.4.0"\nchecked = "git_version'),
            "torch.toml pins 2.4.1",
        ),
    ],
)
def test_a_source_pin_without_a_full_commit_or_the_lines_version_is_refused(recipes_copy, bad, message):
    path = recipes_copy / "source-builds.toml"
    text = path.read_text()
    assert bad[0] in text
    path.write_text(text.replace(*bad))
    with pytest.raises(RecipeError, match=message):
        load(recipes_copy)


def test_a_recorded_failure_refuses_its_cell_by_default_citing_it(recipes_copy):
    """Only a public record of a real failure refuses a cell: named with its source; an explicit source request
    builds it anyway."""
    path = recipes_copy / "source-builds.toml"
    path.write_text(path.read_text().replace("failure = []\n", "") + FAILURE)
    recipes = load(recipes_copy)
    with pytest.raises(
        KnownFailureError,
        match=r"torch 2.4 on ROCm 6.2 is refused: hipcc rejects X "
        r"\(https://example.org/issue/1\); --torch-source source builds",
    ):
        resolve(Request(accel_version="6.2", torch="2.4"), recipes)
    assert resolve(Request(accel_version="6.2", torch="2.4", torch_source="source"), recipes).unproven
    assert resolve(Request(accel_version="6.2", torch="2.3"), recipes).unproven  # other cells are not refused


#: test data only: the shape of a recorded failure
FAILURE = """
[[failure]]
flavor = "rocm"
release = "6.2"
torch = "2.4"
says = "hipcc rejects X"
source = "https://example.org/issue/1"
"""
