"""Request -> Plan: check a version request against recipes/ and pin every input of the build."""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from builder.plan import gpu_names, placeholders, wheel_hashes
from builder.plan.cells import Cell
from builder.plan.lock_names import lock_path
from builder.plan.recipes import (
    BuildTools,
    Flavor,
    PatchEntry,
    Recipes,
    Record,
    Release,
    SourceBuild,
    SourcePin,
    TorchLine,
    load,
    version_key,
)


#: What each of TheRock's development statuses means (its SUPPORTED_GPUS.md, "For the purposes of the table below").
STATUS_MEANS = {
    "Sanity-Tested": "sanity-tested (CI or light manual QA), not yet tested in the release process",
    "Build Passing": 'packages are built but not sanity-tested, which "does not imply the runtime is functional"',
}


class ResolveError(Exception):
    """A request that cannot be built; the message names the problem and the nearest valid choices."""


class NoSuchCellError(ResolveError):
    """The combination is no cell at all: its torch line has no wheel there and cannot be built from source."""


class UnprovenSourceError(ResolveError):
    """A source build no peer has shown to compile, requested with --proven-only; `plan` is the refused plan."""

    def __init__(self, plan: "Plan") -> None:
        super().__init__(f"{plan.cell.key}: {plan.evidence_step} (--proven-only refuses it)")
        self.plan = plan


class KnownFailureError(NoSuchCellError):
    """A cell with a public record of a real failure (recipes/source-builds.toml [[failure]]), refused by default."""


class Request(BaseModel):
    """What the user asked for (CLI flags). None means "the recipe's default"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flavor: str = "rocm"
    accel_version: str | None = None  # the ROCm release for flavor rocm; None for cpu
    torch: str | None = None  # None: the newest line with an official wheel for the release (echoed in Plan.notes)
    arch: str | None = None
    python: str | None = None
    torch_source: Literal["auto", "wheel", "source"] = "auto"
    base_image: str | None = None
    install_accel: bool = False  # start from the plain OS image and install ROCm with amdgpu-install
    proven_only: bool = False  # refuse a source build that no peer has shown to compile (UnprovenSourceError)


class Plan(BaseModel):
    """Every input of one build, pinned. Rendering a Plan needs nothing else."""

    model_config = ConfigDict(frozen=True)

    cell: Cell
    flavor: Flavor
    release: Release
    torch: TorchLine
    torch_source: Literal["wheel", "source"]
    torch_source_reason: str
    torch_requirement: str  # "torch==2.5.1+rocm6.2" (official wheel) or "torch==2.4.1+rocm6.2" (source build)
    wheel_index_url: str  # the PyTorch index of torch (wheel route) or of compile_requirement (source route); "" = none
    base_image: str  # reference used in FROM (with @digest when one is known)
    amdgpu_install: str  # amdgpu-install package version to install, "" when the base has ROCm
    stack: dict[str, str]  # package -> version (HF stack + numpy + sentencepiece)
    os_packages: tuple[str, ...]  # accelerator packages installed in the base (source route: the libs torch links)
    build_tools: BuildTools
    compile_unavailable: str  # why torch.compile cannot work in this image ("" = it can)
    compile_requirement: str = ""  # "pytorch-triton-rocm==3.0.0": installed after a source build's torch ("" = none)
    source_build: SourceBuild | None = None  # the peer-proven source build (source route), None when unproven
    source_pin: SourcePin | None = None  # the commit an unproven source build checks out (source-builds.toml)
    evidence: tuple[Record, ...] = ()  # what the public record says about this cell (source-builds.toml [[evidence]])
    evidence_step: str = ""  # how far this cell's torch is proven (source-builds.toml [step])
    notes: tuple[str, ...] = ()  # what the resolver chose for the user (--rocm 6.1 -> 6.1.2); not part of the hash
    wheel_hashes: dict[str, str] = {}  # official wheels of torch_version for this Python: file -> sha256 (recorded)
    patches: tuple[PatchEntry, ...]
    patch_dir: Path | None  # recipes/patches/torch-<line> (source route), copied into the context
    lock_path: Path  # recipes/locks/torch<line>-py<python>.txt: what pip installs, with hashes (builder.plan.lock)
    arch_name: str = ""  # the marketing name the request gave for the arch (--arch MI250X), echoed back
    stages: tuple[str, ...]

    @property
    def torch_stage(self) -> str:
        """The stage the runtime starts from: torch, and on a source build its compile backend when it has one."""
        return "torch-compile" if self.compile_requirement else f"torch-{self.torch_source}"

    @property
    def unproven(self) -> bool:
        """A source build that no peer has shown to compile (--proven-only refuses it)."""
        return self.torch_source == "source" and self.source_build is None

    @property
    def git_source(self) -> dict | None:
        """What a source build checks out: repository, ref, commit ("" = the ref as fetched), fork or upstream,
        and the peer build that proves it (None = unproven); None for the wheel route."""
        if self.torch_source != "source":
            return None
        build, pin = self.source_build, self.source_pin
        if build is None and pin is None:
            return {
                "repo": self.torch.git_url,
                "ref": self.torch.git_tag,
                "commit": "",
                "fork": False,
                "proof": "unproven",
                "peer": None,
                "checked": None,
            }
        if build is None:
            return {
                "repo": pin.repo,
                "ref": pin.ref,
                "commit": pin.commit,
                "fork": False,
                "proof": "unproven",
                "peer": None,
                "checked": pin.checked,
                "tag_commit": pin.tag_commit,
                "tag_checked": pin.tag_checked,
                "why": pin.why,
            }
        return {
            "repo": build.repo,
            "ref": build.ref,
            "commit": build.commit,
            "fork": build.fork,
            "proof": "peer-built",
            "peer": build.peer,
            "checked": build.checked,
        }

    @property
    def apt_pins(self) -> dict | None:
        """How the accelerator's OS packages are pinned (recipes/rocm.toml apt_pin): the repository build, the exact
        versions, the packages taken at that build's version, those installed unpinned, and where it was read; None
        when the plan installs no OS packages."""
        if not self.os_packages:
            return None
        pin = self.release.apt_pin
        packages, exact = (pin.packages, pin.exact) if pin else ((), {})
        return {
            "build": pin.build if pin else None,
            "exact": {p: exact[p] for p in self.os_packages if p in exact},
            "by_build": [p for p in self.os_packages if p in packages and p not in exact],
            "unpinned": [p for p in self.os_packages if p not in packages],
            "checked": pin.checked if pin else None,
        }

    @property
    def wheel_triton(self) -> dict | None:
        """The Triton an official wheel of this line pulls from its index (name, pin, where a peer's resolution
        showed it); None on the source route or where no pin was verified."""
        line, package = self.torch, self.torch.compile_package or self.flavor.compile_package
        if self.torch_source != "wheel" or not (package and line.compile_version):
            return None
        if self.wheel_index_url != placeholders.fill(self.flavor.wheel_index, suffix=line.compile_index):
            return None  # the pin was read for another index's wheel of this line
        return {"package": package, "version": line.compile_version, "checked": line.compile_checked}

    @property
    def accel_wheels(self) -> dict | None:
        """The accelerator userspace as wheels (pip-ROCm route): what the torch stage installs before torch, for the
        cell's arch only, what that brings, and the per-arch packages of which only the cell's may be present."""
        accel = self.release.pip_accel
        if accel is None or self.torch_source != "wheel":
            return None
        fill = {"arch": self.cell.arch or "", "torch": self.torch_version}
        return {
            "requirements": [placeholders.fill(r, **fill) for r in accel.requirements],
            "packages": [placeholders.fill(p, **fill) for p in accel.packages],
            "device_packages": [placeholders.fill(p, **fill) for p in accel.device_packages],
            "device_prefixes": [p.removesuffix("{arch}") for p in accel.device_packages],
            "hip_version": accel.hip_version or None,
            "source": accel.source,
        }

    @property
    def arch_caveats(self) -> tuple[Record, ...]:
        """What the public record holds against the cell's GPU arch on its release: the development status of the
        build system that made the release when it is not Release-Ready, then the release's records of that arch
        (recipes/rocm.toml arch_status, arch_record)."""
        arch, release = self.cell.arch, self.release
        status = release.arch_status.of(arch) if release.arch_status and arch else ""
        caveats = []
        if status and status != "Release-Ready":
            caveats.append(
                Record(
                    says=f'{arch} is "{status}" in TheRock, which built {self.flavor.label} {release.version}: '
                    f"{STATUS_MEANS[status]}",
                    source=release.arch_status.source,
                )
            )
        caveats += [Record(says=r.says, source=r.source) for r in release.arch_record if r.arch == arch]
        return tuple(caveats)

    @property
    def compile_needs_gpu(self) -> str:
        """Why torch.compile fails on a host with no GPU with this cell's wheel (a known regression), or ""."""
        if self.torch_source != "wheel":
            return ""
        return self.torch.compile_needs_gpu.get(self.torch_version.partition("+")[2], "")

    @property
    def torch_version(self) -> str:
        """The exact version the image's torch must report, local label included ("2.4.1+rocm6.2")."""
        return self.torch_requirement.removeprefix("torch==")

    def pinned(self) -> dict:
        """The resolved inputs as plain data (goes into manifest.json and the recipe hash)."""
        return {
            "cell": self.cell.model_dump(),
            "flavor": self.flavor.name,
            "accel_version": self.release.version if self.flavor.versioned else None,
            "base_image": self.base_image,
            "base_image_pin": "digest" if "@sha256:" in self.base_image else "tag only",
            "base_image_checked": self.release.base_digest_checked or None
            if "@sha256:" not in self.base_image and self.base_image == self.release.base_image
            else None,
            "amdgpu_install": self.amdgpu_install or None,
            "os_codename": self.release.codename,
            "python": self.cell.python,
            "arch": self.cell.arch,
            "torch": {
                "line": self.torch.line,
                "version": self.torch.version,
                "source": self.torch_source,
                "reason": self.torch_source_reason,
                "requirement": self.torch_requirement,
                "expected_version": self.torch_version,
                "backend": self.flavor.backend or None,
                "compile": {
                    "available": not self.compile_unavailable,
                    "reason": self.compile_unavailable or None,
                    "requirement": self.compile_requirement or None,
                    "checked": self.torch.compile_checked if self.compile_requirement else None,
                },
                "wheel_pulls": self.wheel_triton,
                "compile_needs_gpu": self.compile_needs_gpu or None,
                "wheel_index_url": self.wheel_index_url or None,
                "wheel_hashes": (self.wheel_hashes or "unhashed") if self.torch_source == "wheel" else None,
                "git": self.git_source,
                "build_env": dict(sorted(self.flavor.build_env.items())) if self.torch_source == "source" else {},
            },
            "stack": dict(sorted(self.stack.items())),
            "accel_wheels": self.accel_wheels,
            "os_packages": list(self.os_packages),
            "apt_pin": self.apt_pins,
            "build_tools": {
                "venv": dict(sorted(self.build_tools.venv.items())),
                "torch_build": dict(sorted(self.build_tools.torch_build.items()))
                if self.torch_source == "source"
                else {},
                "source_date_epoch": self.build_tools.source_date_epoch,
            },
            "patches": [p.model_dump() for p in self.patches],
            "stages": list(self.stages),
            "evidence": {"step": self.evidence_step, "record": [r.model_dump() for r in self.evidence]},
            "sources": {"release": self.release.source, "torch": self.torch.source},
        }

    @cached_property
    def recipe_hash(self) -> str:
        """sha256 of the resolved inputs: equal for equal plans, different when any pin changes."""
        return hashlib.sha256(json.dumps(self.pinned(), sort_keys=True).encode()).hexdigest()

    def describe(self) -> list[tuple[str, str]]:
        """(field, value) rows for printing a plan."""
        rows = [
            ("cell", self.cell.key),
            *(
                [("arch", f"{self.cell.arch} (--arch {self.arch_name}: recipes/gpu-names.toml)")]
                if self.arch_name
                else []
            ),
            ("base image", self.base_image),
        ]
        if self.amdgpu_install:
            rows.append(("ROCm install", f"amdgpu-install {self.amdgpu_install} --usecase=rocm --no-dkms"))
        rows += [
            ("python", self.cell.python),
            ("torch", f"{self.torch_requirement} ({self.torch_source}: {self.torch_source_reason})"),
            ("evidence", self.evidence_step),
        ]
        if self.wheel_index_url:
            rows.append(("torch index", self.wheel_index_url))
        if accel := self.accel_wheels:
            rows.append(
                (
                    f"{self.flavor.label} wheels",
                    f"{' '.join(accel['requirements'])} (this arch's device "
                    f"packages only: {', '.join(accel['device_packages'])})",
                )
            )
            if self.release.pip_accel.without_device:
                rows.append(("without them", self.release.pip_accel.without_device))
        if triton := self.wheel_triton:
            rows.append(("triton", f"{triton['package']}=={triton['version']} (pulled by the wheel from its index)"))
        if (git := self.git_source) is not None:
            origin = "fork" if git["fork"] else "upstream"
            rows.append(("torch source", f"{git_text(git)} ({origin})"))
            rows.append(("peer build", git["peer"] or "none: the first passing build is the proof"))
            rows.append(("patches", ", ".join(p.name for p in self.patches) or "(none)"))
            if self.flavor.source_build_estimate:
                rows.append(("build size", self.flavor.source_build_estimate))
        if self.os_packages:
            rows.append(("OS packages", " ".join(self.os_packages)))
            rows.append(("apt pins", apt_pin_text(self.apt_pins)))
        if self.compile_unavailable:
            rows.append(("torch.compile", f"unavailable: {self.compile_unavailable}"))
        elif self.compile_needs_gpu:
            rows.append(("torch.compile", f"needs a GPU: {self.compile_needs_gpu}"))
        elif self.compile_requirement:
            rows.append(("torch.compile", f"{self.compile_requirement} from {self.wheel_index_url} (--no-deps)"))
        rows += [(name, version) for name, version in sorted(self.stack.items())]
        rows += [("stages", " -> ".join(self.stages)), ("recipe hash", self.recipe_hash[:12])]
        return rows


def git_text(git: dict) -> str:
    """One line naming the source a build checks out: the commit built and, where it is not the tag's, both."""
    repo, ref, commit, tag_commit = git["repo"], git["ref"], git.get("commit"), git.get("tag_commit")
    if not commit:
        return f"{repo} {ref}"
    if tag_commit and tag_commit != commit:
        return f"{repo} @ {commit}, the commit {ref}'s own wheels record (the tag {ref} points at {tag_commit})"
    return f"{repo} {ref} @ {commit}"


def apt_pin_text(pins: dict | None) -> str:
    """One line saying how the OS packages are pinned (Plan.apt_pins)."""
    if not pins:
        return "no OS packages"
    if pins["build"] is None:
        return f"unpinned: {' '.join(pins['unpinned'])} (no version of this release's packages was verified)"
    parts = [f"repository build {pins['build']}"]
    if pins["exact"]:
        parts.append("exact " + " ".join(f"{p}={v}" for p, v in pins["exact"].items()))
    if pins["by_build"]:
        parts.append(f"at that build's version (read at build time) {' '.join(pins['by_build'])}")
    if pins["unpinned"]:
        parts.append(f"unpinned {' '.join(pins['unpinned'])}")
    return "; ".join(parts)


def resolve(request: Request, recipes: Recipes | None = None) -> Plan:
    """Pin every input of `request`, or raise ResolveError saying what is wrong and what would work."""
    recipes = recipes or load()
    flavor = _known_entry("flavor", request.flavor, recipes.flavors)
    notes: list[str] = []
    release = _release(request, flavor, recipes.releases[flavor.name], notes)
    torch = (
        _torch(request.torch, flavor, recipes)
        if request.torch is not None
        else _default_torch(flavor, release, recipes, notes)
    )
    arch = _arch(request.arch, flavor, release, notes)
    python = _python(request.python, release, torch, flavor)
    source, reason, suffix = _torch_route(request.torch_source, flavor, release, torch, recipes)
    source_build = recipes.source_build(flavor.name, release.version, torch.line) if source == "source" else None
    unproven = source == "source" and source_build is None
    failure = recipes.cell_record("failure", flavor.name, release.version, torch.line)
    if failure and request.torch_source != "source":
        raise KnownFailureError(
            f"torch {torch.line} on {flavor.label} {release.version} is refused: {failure.says} "
            f"({failure.source}); --torch-source source builds it anyway"
        )
    evidence = recipes.cell_record("evidence", flavor.name, release.version, torch.line)
    base_image, amdgpu_install = _base_and_installer(request, flavor, release)
    if source == "wheel":
        local = placeholders.fill(flavor.local_version, suffix=suffix)
        index = release.wheel_index or placeholders.fill(flavor.wheel_index, suffix=suffix)
    else:  # a source build stamps its own local label, as official wheels carry one ("2.4.1+rocm6.2")
        local, index = placeholders.fill(flavor.source_local_version, version=release.version), ""
    requirement = f"torch=={torch.version}" + (f"+{local}" if local else "")
    compile_requirement, compile_unavailable = "", ""
    if source == "source" and flavor.compile_package and torch.compile_version:
        # the backend the official wheel of the same release requires, from the index that carries it
        compile_requirement = f"{torch.compile_package or flavor.compile_package}=={torch.compile_version}"
        index = placeholders.fill(flavor.wheel_index, suffix=torch.compile_index)
    elif source == "source":
        compile_unavailable = flavor.source_compile
    plan = Plan(
        cell=Cell(
            flavor=flavor.name,
            accel_version=release.version if flavor.versioned else None,
            torch=torch.line,
            arch=arch,
            python=python,
        ),
        flavor=flavor,
        release=release,
        torch=torch,
        torch_source=source,
        torch_source_reason=reason,
        torch_requirement=requirement,
        wheel_index_url=index,
        base_image=base_image,
        amdgpu_install=amdgpu_install,
        stack=recipes.stacks[torch.line],
        os_packages=release.source_build_packages if source == "source" else (),
        build_tools=recipes.build_tools,
        compile_unavailable=compile_unavailable,
        compile_requirement=compile_requirement,
        source_build=source_build,
        source_pin=recipes.source_pin(torch.line) if unproven else None,
        evidence=evidence.record if evidence and source == "source" else (),
        evidence_step=(
            recipes.steps.unproven
            if unproven
            else recipes.steps.peer
            if source == "source"
            else recipes.steps.vendor_wheel.format(builder=release.wheel_builder)
            if release.wheel_builder
            else recipes.steps.wheel
        ),
        notes=tuple(notes),
        wheel_hashes=_wheel_hashes(recipes, requirement, python) if source == "wheel" else {},
        patches=tuple(recipes.patch_series(torch.line)) if source == "source" else (),
        patch_dir=recipes.patches_dir(torch.line) if source == "source" else None,
        lock_path=lock_path(recipes, torch.line, python),
        arch_name=gpu_names.canonical(request.arch)[1] if request.arch and flavor.name == "rocm" else "",
        stages=(
            "base",
            "torch-src",
            "torch-source-build",
            "torch-source",
            *(("torch-compile",) if compile_requirement else ()),
            "sentencepiece",
            "runtime",
        )
        if source == "source"
        else ("base", "torch-wheel", "sentencepiece", "runtime"),
    )
    if plan.unproven and request.proven_only:
        raise UnprovenSourceError(plan)
    return plan


def _wheel_hashes(recipes: Recipes, requirement: str, python: str) -> dict[str, str]:
    """The recorded sha256 of the official wheels of `requirement` for `python` (recipes/wheel-hashes.toml)."""
    from builder.plan.recipes import RecipeError

    try:
        recorded = wheel_hashes.recorded(recipes.root, recipes.digest)
    except (OSError, ValueError) as exc:
        raise RecipeError(str(exc)) from exc
    return wheel_hashes.for_requirement(recorded, requirement.removeprefix("torch=="), python)


def _nearest(value: str, choices: list[str], n: int = 3) -> list[str]:
    """The `n` choices closest to `value` (numeric distance for versions, else edit similarity)."""
    import difflib

    try:
        target = [int(p) for p in value.split(".")]
        ranked = sorted(
            choices, key=lambda c: [abs(a - b) for a, b in zip([*map(int, c.split(".")), 0, 0], target + [0, 0])]
        )
        return sorted(ranked[:n], key=version_key)
    except ValueError:
        return difflib.get_close_matches(value, choices, n=n, cutoff=0) or choices[:n]


def _choices(value: str, choices: list[str]) -> str:
    if not choices:
        return "there are none"
    near = _nearest(value, choices)
    rest = "" if len(choices) <= len(near) else f" (all: {', '.join(choices)})"
    return f"nearest valid: {', '.join(near)}{rest}"


def _known_entry(what: str, value: str, table: dict):
    if value not in table:
        raise ResolveError(f"unknown {what} {value!r}; {_choices(value, sorted(table, key=version_key))}")
    return table[value]


def _release(request: Request, flavor: Flavor, releases: dict[str, Release], notes: list[str]) -> Release:
    known = sorted(releases, key=version_key)
    if not flavor.versioned:
        if request.accel_version is not None:
            raise ResolveError(f"the {flavor.name} flavor takes no accelerator version (got {request.accel_version!r})")
        return releases[known[0]]
    if request.accel_version is None:
        raise ResolveError(
            f"--{flavor.name} VERSION is required for the {flavor.name} flavor; choose one of {', '.join(known)}"
        )
    patches = [v for v in known if v.startswith(f"{request.accel_version}.")]
    if request.accel_version not in releases and patches:  # --rocm 6.1: the newest 6.1.x envbuild knows
        notes.append(
            f"--{flavor.name} {request.accel_version} means {flavor.label} {patches[-1]}, the newest "
            f"{request.accel_version} release envbuild knows"
        )
        return releases[patches[-1]]
    if request.accel_version not in releases:
        raise ResolveError(
            f"unknown {flavor.label} release {request.accel_version!r}; {_choices(request.accel_version, known)}"
        )
    return releases[request.accel_version]


def _torch(value: str, flavor: Flavor, recipes: Recipes) -> TorchLine:
    lines = recipes.torch_lines(flavor.name)
    by_version = {recipes.torch[line].version: line for line in lines}
    line = by_version.get(value, value)
    release_line = ".".join(value.split(".")[:2])
    if line not in lines and release_line in lines:
        pinned = recipes.torch[release_line].version
        raise ResolveError(
            f"torch {value} is not the release envbuild pins for line {release_line} ({pinned}); "
            f"use --torch {release_line}"
        )
    if line not in lines:
        raise ResolveError(
            f"unknown torch {value!r} for the {flavor.name} flavor (known lines: {', '.join(lines)}); "
            f"{_choices(value, lines)}"
        )
    return recipes.torch[line]


def _default_torch(flavor: Flavor, release: Release, recipes: Recipes, notes: list[str]) -> TorchLine:
    """The newest torch line with an official wheel for `release` (else the newest it can build), noted."""
    lines = recipes.torch_lines(flavor.name)
    wheel = [line for line in lines if set(recipes.torch[line].wheel_suffixes) & set(release.wheel_suffixes)]
    source = [
        line
        for line in lines
        if not recipes.torch[line].wheel_only and "source" in flavor.torch_sources and release.source_build
    ]
    where = f"{flavor.label} {release.version}" if flavor.versioned else f"the {flavor.name} flavor"
    if not (wheel or source):
        raise NoSuchCellError(f"no torch line is known for {where}; give --torch")
    line = (wheel or source)[-1]
    builder = f"{release.wheel_builder}'s" if release.wheel_builder else "an official"
    how = f"with {builder} wheel" if wheel else "that builds from source"
    notes.append(f"--torch not given: torch {line}, the newest line {how} for {where}")
    return recipes.torch[line]


def _arch(value: str | None, flavor: Flavor, release: Release, notes: list[str]) -> str | None:
    if not release.archs:
        if value is not None:
            raise ResolveError(f"the {flavor.name} flavor has no GPU arch; drop --arch {value}")
        return None
    if value is None:  # one rule per flavor (recipes/flavors.toml default_arch), said whenever it is taken
        notes.append(f"--arch not given: {flavor.default_arch_why or flavor.default_arch}")
        return flavor.default_arch
    arch, name = gpu_names.canonical(value) if flavor.name == "rocm" else (value, "")
    if arch not in release.archs and not name and flavor.name == "rocm" and gpu_names.looks_like_a_name(arch):
        near = gpu_names.suggestions(arch, list(release.archs))  # a GPU name gets GPU names, not gfx targets
        raise ResolveError(
            f"unknown GPU {arch!r} (recipes/gpu-names.toml); nearest known GPU names on "
            f"{flavor.label} {release.version}: {', '.join(near) or 'none'}; or give a gfx target: "
            f"{', '.join(sorted(release.archs))}"
        )
    if arch not in release.archs:
        given = f"{name} ({arch})" if name else repr(arch)
        raise ResolveError(
            f"arch {given} is not supported by {flavor.label} {release.version}; "
            f"{_choices(arch, sorted(release.archs))}"
        )
    return arch


def _python(value: str | None, release: Release, torch: TorchLine, flavor: Flavor) -> str:
    where = f"{flavor.label} {release.version}" if flavor.versioned else f"{flavor.name} images"
    usable = [p for p in release.pythons if torch.supports_python(p)]
    low, high = torch.python
    if value is None and not usable:
        raise NoSuchCellError(
            f"no Python of {where} ({', '.join(release.pythons)}) is in torch {torch.line}'s range "
            f"{low}-{high}: pick another --torch or release"
        )
    python = value or (release.system_python if release.system_python in usable else usable[-1])
    if python not in release.pythons:
        raise ResolveError(
            f"Python {python} is not available on {where}; {_choices(python, usable or list(release.pythons))}"
        )
    if not torch.supports_python(python):
        raise ResolveError(
            f"Python {python} is outside torch {torch.line}'s range {low}-{high}; {_choices(python, usable)}"
        )
    return python


def _torch_route(
    wanted: str, flavor: Flavor, release: Release, torch: TorchLine, recipes: Recipes
) -> tuple[str, str, str]:
    """(route, why, wheel suffix) for `wanted` in auto/wheel/source."""
    suffix = next((s for s in release.wheel_suffixes if s in torch.wheel_suffixes), "")
    where = f"{flavor.label} {release.version}" if flavor.versioned else flavor.name
    if wanted == "source" and "source" not in flavor.torch_sources:
        raise ResolveError(f"the {flavor.name} flavor has no torch source build; use --torch-source wheel or auto")
    if wanted == "source" and torch.wheel_only:
        raise ResolveError(
            f"torch {torch.line} is offered as an official wheel only (recipes/torch.toml: no source "
            f"build of it was verified); use --torch-source auto or wheel"
        )
    if wanted == "source" and not release.source_build:
        raise ResolveError(
            f"no torch source build on {where}: what such a build needs there is not verified "
            f"(recipes/{flavor.releases_file}: source_build = false); use --torch-source auto"
        )
    if wanted == "source":
        return "source", "source build requested", ""
    if suffix and "wheel" in flavor.torch_sources:
        builder = release.wheel_builder
        reason = (
            f"{builder}'s own wheel ({suffix}) from {builder}'s index"
            if builder
            else f"official wheel from the {suffix} index"
        )
        return "wheel", reason + (" (auto: a wheel exists)" if wanted == "auto" else ""), suffix
    with_wheel = [
        line
        for line in recipes.torch_lines(flavor.name)
        if set(recipes.torch[line].wheel_suffixes) & set(release.wheel_suffixes)
    ]
    no_wheel = (
        f"no official torch {torch.line} wheel for {where} "
        f"(torch {torch.line} wheels: {', '.join(torch.wheel_suffixes)}; {where} takes: {', '.join(release.wheel_suffixes)})"
    )
    if torch.wheel_only:
        carry = [
            v
            for v, r in sorted(recipes.releases[flavor.name].items(), key=lambda kv: version_key(kv[0]))
            if set(r.wheel_suffixes) & set(torch.wheel_suffixes)
        ]
        raise NoSuchCellError(
            f"{no_wheel}; torch {torch.line} is offered as an official wheel only; releases whose "
            f"index carries it: {', '.join(carry) or 'none'}"
        )
    if wanted == "auto" and "source" in flavor.torch_sources and release.source_build:
        return "source", f"{no_wheel}; auto chose a source build", ""
    options = ["--torch-source source"] if "source" in flavor.torch_sources and release.source_build else []
    if with_wheel:
        options.append(f"a torch line with a wheel for {where}: {', '.join(with_wheel)}")
    raise NoSuchCellError(f"{no_wheel}; use {' or '.join(options) or 'another release'}")


def _proven(flavor: Flavor, release: Release, torch: TorchLine, recipes: Recipes) -> str | None:
    """How the cell gets a torch someone has built ("official wheel", "peer-built source"), or None."""
    if "wheel" in flavor.torch_sources and set(release.wheel_suffixes) & set(torch.wheel_suffixes):
        return "official wheel"
    if "source" in flavor.torch_sources and recipes.source_build(flavor.name, release.version, torch.line):
        return "peer-built source"
    return None


def nearest_proven(flavor: Flavor, release: Release, torch: TorchLine, recipes: Recipes) -> list[str]:
    """The request flags of the nearest cells whose torch someone has built, each with how."""
    releases = recipes.releases[flavor.name]
    near = []
    if _proven(flavor, release, torch, recipes) == "official wheel":
        near.append(f"--{flavor.name} {release.version} --torch {torch.line} --torch-source auto (official wheel)")
    for version in _nearest(release.version, [v for v in releases if v != release.version]):
        if how := _proven(flavor, releases[version], torch, recipes):
            near.append(f"--{flavor.name} {version} --torch {torch.line} ({how})")
    lines = [line for line in recipes.torch_lines(flavor.name) if line != torch.line]
    for line in _nearest(torch.line, lines):
        if how := _proven(flavor, release, recipes.torch[line], recipes):
            near.append(f"--{flavor.name} {release.version} --torch {line} ({how})")
    return near


def _base_and_installer(request: Request, flavor: Flavor, release: Release) -> tuple[str, str]:
    if request.install_accel and not release.amdgpu_install:
        raise ResolveError(f"the {flavor.name} flavor has no installer route; drop --install-rocm")
    if request.base_image:
        return request.base_image, release.amdgpu_install if request.install_accel else ""
    if request.install_accel:
        return release.os_image, release.amdgpu_install
    digest = f"@{release.base_digest}" if release.base_digest else ""
    return release.base_image + digest, ""


def all_plans(recipes: Recipes | None = None, flavor: str | None = None, proven_only: bool = False) -> list[Plan]:
    """The known cells: every valid (flavor, release, torch line, arch, Python), torch source `auto`; with
    `proven_only`, source builds no peer has shown to compile are left out. Resolved once per recipe content
    (its digest and root) and selection; the plans are frozen, the list is the caller's own."""
    recipes = recipes or load()
    key = (recipes.digest, str(recipes.root), flavor, proven_only)
    if key not in _ALL_PLANS:
        _ALL_PLANS[key] = tuple(_resolve_all(recipes, flavor, proven_only))
    return list(_ALL_PLANS[key])


#: all_plans' results by (recipe digest, recipe root, flavor, proven_only)
_ALL_PLANS: dict[tuple, tuple[Plan, ...]] = {}


def _resolve_all(recipes: Recipes, flavor: str | None, proven_only: bool) -> list[Plan]:
    plans = []
    for name in sorted(recipes.flavors) if flavor is None else [flavor]:
        fl = recipes.flavors[name]
        for version, release in sorted(recipes.releases[name].items(), key=lambda kv: version_key(kv[0])):
            for line in recipes.torch_lines(name):
                for arch in sorted(release.archs) or [None]:
                    for python in release.pythons:
                        if not recipes.torch[line].supports_python(python):
                            continue
                        request = Request(
                            flavor=name,
                            accel_version=version if fl.versioned else None,
                            torch=line,
                            arch=arch,
                            python=python,
                            proven_only=proven_only,
                        )
                        try:
                            plans.append(resolve(request, recipes))
                        except (UnprovenSourceError, NoSuchCellError):
                            continue
    return plans
