"""recipes.py's refusals of bad recipe data, rule by rule, on a copy of recipes/ edited one value at a time: each
is a RecipeError naming what is wrong (what `envbuild` turns into exit 2 before anything is rendered)."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from builder.plan.recipes import SERIES_FORMS, RecipeError, load, version_key
from builder.plan.resolve import Request, resolve
from tests.plan.test_recipes import CUDA_FLAVOR, CUDA_RELEASES, FORK_BUILD, PATCH

SHA = "0123456789abcdef0123456789abcdef01234567"


def _edit(root, name: str, old: str, new: str, count: int = 1) -> None:
    path = root / name
    text = path.read_text()
    assert old in text, (name, old)
    path.write_text(text.replace(old, new, count))


def _refused(root, message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        load(root)


@pytest.mark.parametrize(
    "line",
    [
        "patch",
        "patch 0001-example.patch extra",
        f"commit {SHA}",
        f"commit {SHA} https://x.example/p extra",
        f"branch {SHA} https://x.example/p",
        f"revert {SHA} https://x.example/p",
        "zzz 0001-example.patch",
        f"url https://x.example/{SHA}/a.patch sha256:{'0' * 64}",  # no upstream link
        f"url http://x.example/{SHA}/a.patch sha256:{'0' * 64} https://x.example/p",  # not https
        f"url https://x.example/{SHA}/a.patch sha256:{'0' * 64} file:///etc/passwd",
    ],
)
def test_a_series_line_of_another_shape_or_kind_is_refused(recipes_copy, line):
    (recipes_copy / "patches" / "torch-2.4" / "0001-example.patch").write_text(PATCH)
    (recipes_copy / "patches" / "torch-2.4" / "series").write_text(f"{line}\n")
    _refused(recipes_copy, re.escape(f"series:1: expected {SERIES_FORMS}, got {line!r}"))


@pytest.mark.parametrize(
    "url, digest, message",
    [
        ("https://raw.example/o/r/main/a.patch", "sha256:" + "0" * 64, "names no 40-hex commit in its path"),
        (f"https://raw.example/o/r/{SHA}/a.patch", "0" * 64, "expected sha256:<64 hex digits> after the URL"),
        (f"https://raw.example/o/r/{SHA}/a.patch", "sha256:" + "0" * 63, "expected sha256:<64 hex digits>"),
        (f"https://raw.example/o/r/{SHA}/a.patch", "sha256:" + "A" * 64, "expected sha256:<64 hex digits>"),
    ],
)
def test_a_published_patch_is_taken_only_at_a_pinned_commit_with_its_sha256(recipes_copy, url, digest, message):
    (recipes_copy / "patches" / "torch-2.4" / "series").write_text(f"url {url} {digest} https://x.example/p\n")
    _refused(recipes_copy, re.escape(message))


@pytest.mark.parametrize(
    "patch",
    [
        PATCH.replace("Upstream: https://github.com/pytorch/pytorch/pull/1\n", ""),  # a reason, but no upstream link
        PATCH.replace("Why: shows the header a patch needs.\n", ""),
        "From: envbuild\n\ndiff --git a/a.txt b/a.txt\n+Why: in the diff\n+Upstream: in the diff\n",  # not the header
    ],
)
def test_a_patch_needs_why_and_upstream_in_its_own_header(recipes_copy, patch):
    (recipes_copy / "patches" / "torch-2.4" / "0001-example.patch").write_text(patch)
    (recipes_copy / "patches" / "torch-2.4" / "series").write_text("patch 0001-example.patch\n")
    _refused(recipes_copy, "0001-example.patch needs 'Why:' and 'Upstream:' lines in its header")


def test_a_source_capable_torch_line_needs_its_patch_series(recipes_copy):
    (recipes_copy / "patches" / "torch-2.4" / "series").unlink()
    _refused(recipes_copy, "torch line 2.4 can be built from source but has no patches/torch-2.4/series")


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('flavor = "rocm"', 'flavor = "tpu"', "unknown flavor, release or torch line"),
        ('release = "6.2"', 'release = "9.9"', "unknown flavor, release or torch line"),
        ('torch = "2.4"', 'torch = "9.9"', "unknown flavor, release or torch line"),
        ('version = "2.4.1"', 'version = "2.4.2"', "builds 2.4.2, but torch.toml pins 2.4.1"),
    ],
)
def test_a_source_build_must_name_known_coordinates_and_the_lines_version(recipes_copy, old, new, message):
    _edit(recipes_copy, "source-builds.toml", "build = []\n", FORK_BUILD.replace(old, new))
    _refused(recipes_copy, message)


def test_a_source_build_listed_twice_is_refused(recipes_copy):
    _edit(recipes_copy, "source-builds.toml", "build = []\n", FORK_BUILD + FORK_BUILD.replace("test data", "again"))
    _refused(recipes_copy, re.escape("source-builds.toml lists one (flavor, release, torch) twice"))


def test_a_source_build_proves_only_its_own_torch_line(recipes_copy):
    """A build of 2.4 on ROCm 6.2 is no proof for 2.5 there (a line that sorts after it)."""
    _edit(recipes_copy, "source-builds.toml", "build = []\n", FORK_BUILD)
    recipes = load(recipes_copy)
    assert recipes.source_build("rocm", "6.2", "2.4").commit == SHA
    assert recipes.source_build("rocm", "6.2", "2.5") is None
    assert recipes.source_build("rocm", "6.2.4", "2.4") is None and recipes.source_build("rocm", "6.1.2", "2.4") is None


@pytest.mark.parametrize(
    "repo, fork",
    [
        ("https://github.com/pytorch/pytorch", False),
        ("https://github.com/pytorch/pytorch.git", False),
        ("https://github.com/pytorch/pytorch/", False),
        ("https://github.com/ROCm/pytorch.git", True),
        ("https://github.com/zzz-lab/pytorch.git", True),  # sorts after upstream's URL
    ],
)
def test_fork_means_any_repository_but_upstream_pytorch(recipes_copy, repo, fork):
    _edit(
        recipes_copy,
        "source-builds.toml",
        "build = []\n",
        FORK_BUILD.replace('repo = "https://github.com/ROCm/pytorch.git"', f'repo = "{repo}"'),
    )
    assert load(recipes_copy).source_build("rocm", "6.2", "2.4").fork is fork


@pytest.mark.parametrize(
    "name, old, new, message",
    [
        ("flavors.toml", 'backend = "hip"', 'backend = "opencl"', "backend must be '', 'hip' or 'cuda'"),
        (
            "flavors.toml",
            'torch_sources = ["wheel", "source"]',
            "torch_sources = []",
            "non-empty subset of wheel/source",
        ),
        (
            "flavors.toml",
            'torch_sources = ["wheel", "source"]',
            'torch_sources = ["wheel", "conda"]',
            "non-empty subset of wheel/source",
        ),
        (
            "rocm.toml",
            'apt_key_fingerprint = "CA8BB4727A47B4D09B4EE8969386B48A1A693C5C"',
            'apt_key_fingerprint = "ca8bb4727a47b4d09b4ee8969386b48a1a693c5c"',
            "40 upper-case hex digits",
        ),
        ("rocm.toml", 'pythons = ["3.9", "3.10", "3.11", "3.12"]', 'pythons = ["3.9", "3.x"]', "dotted numbers"),
        ("torch.toml", '[torch."2.4"]', '[torch."2.4-rocm"]', "a torch line must be a dotted number"),
    ],
)
def test_each_field_rule_refuses_its_bad_value(recipes_copy, name, old, new, message):
    _edit(recipes_copy, name, old, new)
    if name == "torch.toml":  # the stack and patches of the renamed line follow it, so only the name is wrong
        _edit(recipes_copy, "hf-stack.toml", '[stack."2.4"]', '[stack."2.4-rocm"]')
        (recipes_copy / "patches" / "torch-2.4").rename(recipes_copy / "patches" / "torch-2.4-rocm")
    _refused(recipes_copy, message)


def test_an_unreadable_recipe_file_is_a_recipe_error_naming_it(recipes_copy):
    (recipes_copy / "build-tools.toml").unlink()
    (recipes_copy / "build-tools.toml").mkdir()
    _refused(recipes_copy, re.escape(f"{recipes_copy / 'build-tools.toml'}: [Errno 21] Is a directory"))


def test_the_digest_covers_every_recipe_file(recipes_copy):
    before = load(recipes_copy).digest
    load.cache_clear()
    assert load(recipes_copy).digest == before
    (recipes_copy / "patches" / "torch-2.4" / "README").write_text("a note\n")
    load.cache_clear()
    assert load(recipes_copy).digest != before


@pytest.mark.parametrize("python, supported", [("3.7", False), ("3.8", True), ("3.12", True), ("3.13", False)])
def test_a_torch_line_supports_the_pythons_of_its_range_only(python, supported):
    assert load().torch["2.4"].python == ("3.8", "3.12")
    assert load().torch["2.4"].supports_python(python) is supported


def test_non_numeric_version_parts_sort_before_numbers():
    assert version_key("3.10") == (3, 10)
    assert version_key("6.x") < version_key("6.0") < version_key("6.0.1")


def test_loaded_recipes_cannot_be_changed_in_place():
    """load() is cached: a caller changing a value would change it for every later caller."""
    with pytest.raises(ValidationError, match="frozen"):
        load().torch["2.4"].version = "9.9.9"


def test_a_flavor_without_kernel_databases_installs_none_in_a_source_build(recipes_copy):
    """kernel_dbs is opt-in: a source-capable flavor that does not say it (the test-only one) gets no MIOpen
    kernel database step, ROCm's source cells do."""
    from builder.plan.render import context_files

    (recipes_copy / "flavors.toml").write_text((recipes_copy / "flavors.toml").read_text() + CUDA_FLAVOR)
    (recipes_copy / "cuda.toml").write_text(CUDA_RELEASES + 'source_build_packages = ["ninja-build"]\n')
    import shutil

    shutil.rmtree(recipes_copy / "flavors.d")
    _edit(recipes_copy, "torch.toml", '[torch."2.5"]\nflavors = ["rocm"]', '[torch."2.5"]\nflavors = ["rocm", "cuda"]')
    recipes = load(recipes_copy)
    cuda = resolve(Request(flavor="cuda", accel_version="12.4", torch="2.5", torch_source="source"), recipes)
    rocm = resolve(Request(accel_version="6.2", torch="2.4"), recipes)
    assert cuda.os_packages and "MIOPEN_KDB_ARCH" not in context_files(cuda)[0]["Dockerfile"].decode()
    assert "ARG MIOPEN_KDB_ARCH=gfx90a" in context_files(rocm)[0]["Dockerfile"].decode()


@pytest.mark.parametrize("change", ["add", "remove"])
def test_a_flavor_without_versions_has_exactly_one_release(recipes_copy, change):
    cpu = recipes_copy / "cpu.toml"
    text = cpu.read_text()
    table = text[text.index("[release.cpu]") :]
    cpu.write_text(
        text + "\n" + table.replace("[release.cpu]", "[release.cpu-trixie]")
        if change == "add"
        else text.replace(table, "")
    )
    with pytest.raises(
        RecipeError,
        match=rf"cpu.toml: the cpu flavor takes no version, so it has exactly one "
        rf"\[release.\*\] table, not {2 if change == 'add' else 0}",
    ):
        load(recipes_copy)


PIN = 'exact = { "rocm-llvm-dev" = "18.0.0.24292.60200-66~22.04" }'


@pytest.mark.parametrize(
    "old, new, message",
    [
        (PIN, 'exact = { "rocm-llvm-dev" = "18.0.0.24292.60200-67~22.04" }', "must be one of packages and end in"),
        (PIN, 'exact = { "rocm-smi" = "7.3.0.60200-66~22.04" }', "must be one of packages"),
        ('build = "60200-66~22.04"', 'build = "66"', "build must look like 60200-66~22.04"),
        (
            '\npackages = ["rocm-dev",',
            '\npackages = ["rocm-smi", "rocm-dev",',
            "apt_pin names packages the release does not",
        ),
    ],
)
def test_an_apt_pin_must_name_installed_packages_and_versions_of_its_own_build(recipes_copy, old, new, message):
    _edit(recipes_copy, "rocm.toml", old, new)
    _refused(recipes_copy, re.escape(message))


@pytest.mark.parametrize(
    "old, new",
    [
        ('tag_commit = "ee1b6804381c57161c477caa380a840a84167676"', 'tag_commit = "ee1b6804"'),
        ('tag_commit = "ee1b6804381c57161c477caa380a840a84167676"\n', ""),
    ],
)
def test_a_source_pin_records_the_full_commit_of_its_tag(recipes_copy, old, new):
    _edit(recipes_copy, "source-builds.toml", old, new)
    _refused(recipes_copy, "tag_commit")
