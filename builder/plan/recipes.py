"""Load and validate the version data in recipes/ (TOML files with their sources, patch series)."""

from __future__ import annotations

import hashlib
import re
import tomllib
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from builder.paths import RECIPES_DIR, RECIPES_ENV_VAR
from builder.plan import recipe_grammar as g
from builder.plan import recipe_overlay

_PATCH_NAME = re.compile(r"\d{4}-[A-Za-z0-9._-]+\.patch")
_SHA = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"sha256:([0-9a-f]{64})")
_COMMIT_IN_PATH = re.compile(r"/[0-9a-f]{40}/")
_NOTE = re.compile(r"[^\x00-\x1f\x7f]{0,500}")
#: A torch line or Python version ("2.4", "3.10"): they name lock files (builder.plan.lock); fullmatch only.
DOTTED_NUMBER = re.compile(r"\d+(\.\d+)*")


#: Cells (flavor x release x torch line x arch x Python, each Python within the line's range) the recipes may
#: define: `recipes list`, the report and CI resolve every one (the packaged recipes define 855; a site overlay
#: of 53 KB that defined 63,277 took 50 s to list and 6.5 min and 907 MB to report).
MAX_CELLS = 4096


class RecipeError(Exception):
    """recipes/ holds data that does not validate (a bug in the data, not in a request)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Flavor(_Frozen):
    """How an image gets its accelerator userspace and its torch (recipes/flavors.toml)."""

    name: g.Name
    description: g.Line
    releases_file: g.TomlFile
    label: g.Line
    versioned: bool
    torch_sources: tuple[str, ...]
    wheel_index: g.WheelIndex
    local_version: g.LocalVersion
    arch_env: g.EnvName
    build_env: dict[g.EnvName, g.EnvValue]
    source_prepare: g.Line
    compile_job_mem_mb: int
    backend: str = ""  # torch.version attribute a torch of this flavor sets ("hip", "cuda"; "" for cpu)
    source_local_version: g.SourceLocalVersion = (
        ""  # local version label of a source-built wheel ("{version}" = the release)
    )
    # torch.compile's backend for a source-built torch (pytorch-triton-rocm; "" = none)
    compile_package: g.OptionalPackage = ""
    compile_import: g.OptionalPackage = ""  # the module the verify step imports from compile_package
    source_compile: g.Line = ""  # why torch.compile cannot work on a source-built torch without a verified pin
    source_build_estimate: g.Line = ""  # roughly how long and how large a torch source build is (labelled estimate)
    tool_path: g.ImagePath = ""  # directory of the accelerator's tools, put on PATH in every stage (after the venv)
    library_path: g.ImagePath = ""  # directory of the accelerator's libraries, the image's LD_LIBRARY_PATH
    kernel_dbs: bool = False  # a source build installs the precompiled kernel databases of the cell's arch
    default_arch: g.OptionalArch = ""  # the GPU target a request without --arch gets, on every release of the flavor
    default_arch_why: g.Line = ""  # why that one (printed with the choice)

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        if value not in ("", "hip", "cuda"):
            raise ValueError(f"backend must be '', 'hip' or 'cuda', got {value!r}")
        return value

    @field_validator("torch_sources")
    @classmethod
    def _known_sources(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or set(value) - {"wheel", "source"}:
            raise ValueError(f"torch_sources must be a non-empty subset of wheel/source, got {value}")
        return value


class PipAccel(_Frozen):
    """The pip route of an accelerator release: its userspace comes as Python wheels from the torch index, for the
    cell's arch only ("{arch}" and "{torch}" are filled in per cell)."""

    requirements: tuple[g.Requirement, ...]  # installed before torch, e.g. rocm[libraries,device-{arch}]==7.14.0
    packages: tuple[g.Requirement, ...]  # the distributions those requirements bring (the verify step checks each)
    device_packages: tuple[g.Requirement, ...]  # per-arch packages: only the cell's arch's may be installed
    hip_version: g.OptionalDotted = (
        ""  # major.minor torch.version.hip reports ("" = not verified: only "set" is checked)
    )
    without_device: g.Line = ""  # what a torch of this route does without its arch's device package (with source)
    source: g.Line

    @field_validator("requirements")
    @classmethod
    def _one_arch(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or any("device-all" in r for r in value):
            raise ValueError(f"requirements must be non-empty and name the cell's arch, never device-all: {value}")
        return value

    @field_validator("device_packages")
    @classmethod
    def _per_arch(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value or any(not p.endswith("{arch}") for p in value):
            raise ValueError(f"device_packages must end in {{arch}} (one package per GPU arch), got {value}")
        return value


class AptPin(_Frozen):
    """The accelerator's apt packages of one release, pinned (rocm.toml [release."X".apt_pin]): every package in
    `packages` is installed at the version of the repository build `build` (the part AMD's versions end in:
    <module version>.<release>-<build id>~<distro>), exactly `exact[package]` where that version was read in a
    public record; a package of the release's list not named here is installed at whatever the repository serves."""

    build: str  # "60200-66~22.04": ROCm 6.2.0, build 66, Ubuntu 22.04
    packages: tuple[g.Package, ...]
    exact: dict[g.Package, g.Version] = Field(default_factory=dict)
    checked: g.Line  # where the build and each exact version were read

    @field_validator("build")
    @classmethod
    def _build(cls, value: str) -> str:
        if not re.fullmatch(r"[0-9]{5}-[0-9]{1,5}~[0-9]{2}\.[0-9]{2}", value):
            raise ValueError(f"build must look like 60200-66~22.04 (release, build id, distro), got {value!r}")
        return value

    @model_validator(mode="after")
    def _exact_of_the_build(self) -> "AptPin":
        for package, version in self.exact.items():
            if package not in self.packages or not version.endswith("." + self.build):
                raise ValueError(f"exact {package}={version}: must be one of packages and end in .{self.build}")
        return self


class ArchStatus(_Frozen):
    """Each GPU target's development status in the build system that made the release (TheRock SUPPORTED_GPUS.md):
    Release-Ready (tested in the release process), Sanity-Tested (CI or light manual QA), Build Passing (packages
    are produced; "does not imply the runtime is functional")."""

    release_ready: tuple[g.Arch, ...] = ()
    sanity_tested: tuple[g.Arch, ...] = ()
    build_passing: tuple[g.Arch, ...] = ()
    source: g.Line

    def of(self, arch: str) -> str:
        """The status of `arch` as TheRock writes it, "" when the table does not list it."""
        for status, archs in STATUS_NAMES.items():
            if arch in getattr(self, status):
                return archs
        return ""


#: ArchStatus field -> the status as TheRock's table names it.
STATUS_NAMES = {"release_ready": "Release-Ready", "sanity_tested": "Sanity-Tested", "build_passing": "Build Passing"}


class ArchRecord(_Frozen):
    """A public record of how one GPU target fared on the release (a failure, what works instead), with its source."""

    arch: g.Arch
    says: g.Line
    source: g.Line


class Release(_Frozen):
    """One accelerator release of a flavor (a ROCm version; the single cpu pseudo-release)."""

    version: g.ReleaseName
    base_image: g.Image
    base_digest: g.Digest = ""  # sha256:... when verified; FROM then pins image@digest
    os_image: g.Image = ""  # plain OS image for the installer route
    ubuntu: g.OptionalDotted = ""
    codename: g.Codename
    amdgpu_install: g.OptionalVersion = ""  # amdgpu-install package version ("" = no installer route)
    host_kernels: tuple[g.Dotted, ...] = ()  # host kernel lines validated for this release (doctor checks)
    archs: tuple[g.Arch, ...] = ()
    wheel_suffixes: tuple[g.Label, ...]
    system_python: g.Dotted
    pythons: tuple[str, ...]
    python_ppa: g.Ppa = ""
    source_build: bool = True  # a torch source build may be planned here (false: what one needs is not verified)
    source_build_packages: tuple[g.Package, ...] = ()  # OS packages a torch source build needs (build and run time)
    apt_pin: AptPin | None = None  # the accelerator's packages among them, pinned to one repository build
    base_digest_checked: g.Line = ""  # where a digest of base_image was looked for when none is pinned
    wheel_index: g.OptionalUrl = ""  # the torch index of this release when not the flavor's (AMD's own index)
    wheel_builder: g.Line = ""  # who builds the torch wheels of wheel_index ("AMD"); "" = the flavor's index (PyTorch)
    pip_accel: PipAccel | None = (
        None  # the userspace as wheels from the torch index (pip-ROCm route), None = in the base
    )
    apt_key_url: g.OptionalUrl = ""  # the accelerator apt repository's signing key, fetched again in the base stage
    apt_key_fingerprint: str = ""  # ... and checked against this (40 hex, upper case)
    arch_status: ArchStatus | None = None  # TheRock's development status per arch (releases TheRock built)
    arch_record: tuple[ArchRecord, ...] = ()  # public records of single archs on this release
    source: g.Line

    @field_validator("apt_key_fingerprint")
    @classmethod
    def _fingerprint(cls, value: str) -> str:
        if value and not re.fullmatch(r"[0-9A-F]{40}", value):
            raise ValueError(f"apt_key_fingerprint must be 40 upper-case hex digits, got {value!r}")
        return value

    @model_validator(mode="after")
    def _pinned_packages_are_installed(self) -> "Release":
        if self.apt_pin and (extra := sorted(set(self.apt_pin.packages) - set(self.source_build_packages))):
            raise ValueError(f"apt_pin names packages the release does not install: {extra}")
        return self

    @model_validator(mode="after")
    def _arch_data_names_its_archs(self) -> "Release":
        if bool(self.wheel_index) != bool(self.wheel_builder):
            raise ValueError("wheel_index and wheel_builder go together: who builds the torch on that index")
        if self.arch_status is not None:
            listed = [a for field in STATUS_NAMES for a in getattr(self.arch_status, field)]
            if sorted(listed) != sorted(self.archs):
                raise ValueError(f"arch_status must list each of archs {list(self.archs)} once, got {listed}")
        if stray := sorted({r.arch for r in self.arch_record} - set(self.archs)):
            raise ValueError(f"arch_record names archs the release does not list: {stray}")
        return self

    @field_validator("pythons")
    @classmethod
    def _dotted_pythons(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if bad := [v for v in value if not DOTTED_NUMBER.fullmatch(v)]:
            raise ValueError(f"pythons must be dotted numbers such as 3.10 (they name lock files), got {bad}")
        return value


class TorchLine(_Frozen):
    """A PyTorch release line ("2.4") pinned to one release ("2.4.1")."""

    line: str
    flavors: tuple[g.Name, ...]
    version: g.Version
    git_url: g.Url
    git_tag: g.GitRef
    wheel_suffixes: tuple[g.Label, ...]
    python: tuple[g.Dotted, g.Dotted]
    source: g.Line
    wheel_only: bool = False  # never built from source: no source build of this line was verified on any release
    # the Triton package the line's wheel pulls when not the flavor's (triton-rocm)
    compile_package: g.OptionalPackage = ""
    compile_version: g.OptionalVersion = (
        ""  # the compile package's version the official wheel requires ("" = not verified)
    )
    compile_index: g.OptionalLabel = ""  # wheel index suffix that carries it
    compile_checked: g.Line = ""  # where that requirement was read
    # wheel index suffix -> why torch.compile fails on a host with no GPU with that index's wheel (a known
    # regression, with its source); the image records it and the workload runs eager there
    compile_needs_gpu: dict[g.Label, g.Line] = Field(default_factory=dict)
    # Python -> the public record of an image people run with this line and that Python: locked only to complete
    # such images (`run workload --image/--apptainer`), never a recipe cell
    measured_pythons: dict[g.Dotted, g.Line] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _compile_pin_has_its_index_and_source(self) -> "TorchLine":
        if self.compile_version and not (self.compile_index and self.compile_checked):
            raise ValueError(f"torch line {self.line}: compile_version needs compile_index and compile_checked")
        unsourced = sorted(python for python, source in self.measured_pythons.items() if not source.strip())
        if unsourced:
            raise ValueError(
                f"torch line {self.line}: measured_pythons {', '.join(unsourced)} need the public record of an image "
                "that runs this torch with that Python"
            )
        return self

    @field_validator("line")
    @classmethod
    def _dotted_line(cls, value: str) -> str:
        if not DOTTED_NUMBER.fullmatch(value):
            raise ValueError(f"a torch line must be a dotted number such as 2.4 (it names lock files), got {value!r}")
        return value

    def supports_python(self, python: str) -> bool:
        low, high = (version_key(v) for v in self.python)
        return low <= version_key(python) <= high


class BuildTools(_Frozen):
    """Pinned tools that build images (recipes/build-tools.toml): the venv's pip/setuptools/wheel, cmake..."""

    venv: dict[g.Package, g.Version]  # installed into the image venv right after it is made
    torch_build: dict[g.Package, g.Version]  # constraints for a torch source build
    source_date_epoch: int  # SOURCE_DATE_EPOCH of every build step (reproducible timestamps)


class PatchEntry(_Frozen):
    """One line of a series file: a local patch file, an upstream commit or a published patch, the last two
    fetched and checked at build time (the torch-src stage's patch step)."""

    kind: str  # "patch" | "commit" | "url"
    ref: str  # file name, commit sha, or the URL (at a pinned commit) the patch is fetched from
    url: str = ""  # upstream PR/issue the entry carries (commit and url entries)
    sha256: str = ""  # of the patch file (patch entries) or of the fetched bytes, checked at build time (url)
    note: str = ""  # the line's trailing comment: why the entry is there

    @property
    def name(self) -> str:
        """A short name: the file name (patch, url) or the commit."""
        return self.ref.rsplit("/", 1)[-1] if self.kind == "url" else self.ref


class SourceBuild(_Frozen):
    """A torch source build a peer has shown to compile (recipes/source-builds.toml): exact source, exact release."""

    flavor: g.Name
    release: g.ReleaseName
    torch: g.Dotted  # the torch line
    repo: g.Url
    ref: g.GitRef  # tag or release branch the peer builds
    commit: str  # the 40-hex commit of `ref` that was built; the build checks it
    version: g.Version
    peer: g.Url  # link to the peer's build of this commit on this release
    checked: g.Line  # where the peer record was read

    @field_validator("commit")
    @classmethod
    def _full_sha(cls, value: str) -> str:
        if not _SHA.fullmatch(value):
            raise ValueError(f"commit must be a full 40-hex sha seen in the peer's record, got {value[:80]!r}")
        return value

    @property
    def fork(self) -> bool:
        """True when the source is not upstream pytorch/pytorch (e.g. AMD's ROCm/pytorch release branches)."""
        return self.repo.rstrip("/").removesuffix(".git") != "https://github.com/pytorch/pytorch"


class SourcePin(_Frozen):
    """The exact source a torch line's source cells check out when no peer build is listed (source-builds.toml):
    the commit built, and the commit the release tag points at, each with where it was read."""

    torch: g.Dotted
    repo: g.Url
    ref: g.GitRef  # the release tag
    commit: str  # 40 hex: the commit PyTorch's own wheels of `version` were built from -- the one built
    version: g.Version
    checked: g.Line  # how the commit was read
    tag_commit: str  # 40 hex: the commit `ref` points at (may differ from `commit`)
    tag_checked: g.Line  # where the tag's commit was read
    why: g.Line  # why `commit` is the one built

    @field_validator("commit", "tag_commit")
    @classmethod
    def _full_sha(cls, value: str) -> str:
        if not _SHA.fullmatch(value):
            raise ValueError(f"must be a full 40-hex sha read from a public record, got {value[:80]!r}")
        return value


class Record(_Frozen):
    """One public statement about a cell, with where it is said."""

    says: g.Line
    source: g.Line


class CellRecord(_Frozen):
    """What the public record says about one cell ([[evidence]]), or a record of its real failure ([[failure]])."""

    flavor: g.Name
    release: g.ReleaseName
    torch: g.Dotted
    record: tuple[Record, ...] = ()
    says: g.Line = ""  # [[failure]]: what failed
    source: g.Line = ""  # [[failure]]: the issue or file that records it


class EvidenceSteps(_Frozen):
    """The evidence step a plan records, per way of getting torch ([step] of source-builds.toml)."""

    wheel: g.Line
    vendor_wheel: g.Line  # a release whose torch comes from its vendor's index ("{builder}": recipes wheel_builder)
    peer: g.Line
    unproven: g.Line


class Recipes(_Frozen):
    """Everything in recipes/, validated."""

    root: Path
    flavors: dict[str, Flavor]
    releases: dict[str, dict[str, Release]]  # flavor -> version -> release
    torch: dict[str, TorchLine]
    stacks: dict[str, dict[g.Package, g.Version]] = Field(description="torch line -> package -> version")
    build_tools: BuildTools
    source_builds: tuple[SourceBuild, ...] = ()  # peer-proven source builds (recipes/source-builds.toml)
    source_pins: tuple[SourcePin, ...] = ()  # the commit each line's unproven source cells build
    evidence: tuple[CellRecord, ...] = ()  # the public record per source cell
    failures: tuple[CellRecord, ...] = ()  # public records of real failures: refused by default
    steps: EvidenceSteps
    digest: str  # sha256 over every recipe file: changes when any data changes

    def source_build(self, flavor: str, release: str, line: str) -> SourceBuild | None:
        """The peer-proven source build of torch `line` on `flavor` `release`, or None."""
        return next((b for b in self.source_builds if (b.flavor, b.release, b.torch) == (flavor, release, line)), None)

    def source_pin(self, line: str) -> SourcePin | None:
        """The pinned source of torch `line` for cells no peer build covers, or None."""
        return next((s for s in self.source_pins if s.torch == line), None)

    def cell_record(self, table: str, flavor: str, release: str, line: str) -> CellRecord | None:
        """The [[evidence]] or [[failure]] entry (`table`) of one cell, or None."""
        entries = self.evidence if table == "evidence" else self.failures
        return next((e for e in entries if (e.flavor, e.release, e.torch) == (flavor, release, line)), None)

    def torch_lines(self, flavor: str) -> list[str]:
        return sorted((k for k, t in self.torch.items() if flavor in t.flavors), key=version_key)

    def patches_dir(self, line: str) -> Path:
        return self.root / "patches" / f"torch-{line}"

    def patch_series(self, line: str) -> list[PatchEntry]:
        """The parsed series of torch `line` (empty when the line has no patch directory)."""
        return _parse_series(self.patches_dir(line))


def version_key(version: str) -> tuple[int, ...]:
    """'3.10' -> (3, 10); non-numeric parts sort first."""
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def _toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RecipeError(f"{path}: {exc}") from exc


def _parse_series(directory: Path) -> list[PatchEntry]:
    series = directory / "series"
    if not series.exists():
        return []
    entries = []
    for number, raw in enumerate(series.read_text().splitlines(), 1):
        line, _, note = raw.partition(" #")  # '#' inside a URL is not a comment
        line, note = line.strip(), " ".join(note.split())
        if not line or line.startswith("#"):
            continue
        if not _NOTE.fullmatch(note):
            raise RecipeError(f"{series}:{number}: the comment must be one line of at most 500 printable characters")
        entries.append(_series_entry(directory, f"{series}:{number}", line, raw, note))
    return entries


#: What a series line may be; the error for any other line quotes it.
SERIES_FORMS = (
    "'patch NNNN-name.patch', 'commit <40-hex sha> <https URL>' or "
    "'url <https URL naming a 40-hex commit> sha256:<64 hex> <https URL>'"
)


def _series_entry(directory: Path, where: str, line: str, raw: str, note: str) -> PatchEntry:
    kind, *rest = line.split()
    if kind == "patch" and len(rest) == 1 and _PATCH_NAME.fullmatch(rest[0]):
        path = directory / rest[0]
        if not path.is_file():
            raise RecipeError(f"{where}: patch file {rest[0]} does not exist")
        header = path.read_text().split("\ndiff --git", 1)[0]
        if "Why:" not in header or "Upstream:" not in header:
            raise RecipeError(f"{where}: {rest[0]} needs 'Why:' and 'Upstream:' lines in its header")
        sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
        return PatchEntry(kind="patch", ref=rest[0], sha256=sha256, note=note)
    if kind == "commit" and len(rest) == 2 and _SHA.fullmatch(rest[0]) and g.is_url(rest[1]):
        return PatchEntry(kind="commit", ref=rest[0], url=rest[1], note=note)
    if kind == "url" and len(rest) == 3 and g.is_url(rest[0]) and g.is_url(rest[2]):
        if not _COMMIT_IN_PATH.search(rest[0]):
            raise RecipeError(
                f"{where}: {rest[0]} names no 40-hex commit in its path: a patch is fetched at a pinned commit"
            )
        digest = _SHA256.fullmatch(rest[1])
        if digest is None:
            raise RecipeError(f"{where}: expected sha256:<64 hex digits> after the URL, got {rest[1][:80]!r}")
        return PatchEntry(kind="url", ref=rest[0], sha256=digest.group(1), url=rest[2], note=note)
    raise RecipeError(f"{where}: expected {SERIES_FORMS}, got {raw!r}")


def _digest(root: Path) -> str:
    sha = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        sha.update(f"{path.relative_to(root).as_posix()}\0".encode())
        sha.update(hashlib.sha256(path.read_bytes()).digest())
    return sha.hexdigest()


#: Directory of drop-in files: each may add [flavor.X], [torch."L"] and [stack."L"] tables to flavors.toml,
#: torch.toml and hf-stack.toml (a flavor added as data, in files of its own).
DROPIN_DIR = "flavors.d"


def _merged(root: Path, file: str, table: str, dropins: list[dict]) -> dict:
    """`[table]` of recipes/`file` plus the same table of every drop-in; a name defined twice is an error."""
    merged = dict(_toml(root / file)[table])
    for extra in dropins:
        for name, data in extra.get(table, {}).items():
            if name in merged:
                raise RecipeError(f'{DROPIN_DIR}/: [{table}."{name}"] is already defined in {file}')
            merged[name] = data
    return merged


def load(root: Path | None = None, *, site: Path | None = None) -> Recipes:
    """Read and validate recipes/, with the site's folder `site` over it (builder.plan.recipe_overlay; the CLI
    passes the one --recipes or ENVBUILD_RECIPES names); pass another root for tests. Cached per root."""
    if root is None:
        try:
            overlay = recipe_overlay.of(RECIPES_DIR, site)
        except recipe_overlay.OverlayError as exc:
            raise RecipeError(f"the site recipe folder ({RECIPES_ENV_VAR} / --recipes): {exc}") from exc
        root = overlay.root if overlay else RECIPES_DIR
        if overlay:
            try:
                return _load(root)
            except RecipeError as exc:
                raise RecipeError(
                    f"{exc} (with the site recipe folder {overlay.source} over the packaged "
                    "recipes: fix the value there)"
                ) from None
    return _load(root)


def _model(cls, where: str, data, **names):
    """`cls` of one recipe table, or a RecipeError naming the table, each wrong field and what it must be."""
    if not isinstance(data, dict):
        raise RecipeError(f"{where}: a table, not {type(data).__name__}")
    try:
        return cls(**data, **names)
    except ValidationError as exc:
        wrong = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'table'}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors(include_url=False)[:5]
        )
        raise RecipeError(f"{where}: {wrong}") from None


def _clear_cache() -> None:
    _load.cache_clear()


@lru_cache(maxsize=4)
def _load(root: Path) -> Recipes:
    try:
        dropins = [_toml(path) for path in sorted((root / DROPIN_DIR).glob("*.toml"))]
        flavor_data = _merged(root, "flavors.toml", "flavor", dropins)
        flavors = {
            name: _model(Flavor, f"flavors.toml [flavor.{name}]", d, name=name) for name, d in flavor_data.items()
        }
        releases = {
            name: {
                v: _model(Release, f'{f.releases_file} [release."{v}"]', d, version=v)
                for v, d in _toml(root / f.releases_file).get("release", {}).items()
            }
            for name, f in flavors.items()
        }
        torch = {
            line: _model(TorchLine, f'torch.toml [torch."{line}"]', d, line=line)
            for line, d in _merged(root, "torch.toml", "torch", dropins).items()
        }
        stacks = {line: dict(d) for line, d in _merged(root, "hf-stack.toml", "stack", dropins).items()}
        build_tools = _model(BuildTools, "build-tools.toml", _toml(root / "build-tools.toml"))
        sources = _toml(root / "source-builds.toml")
        where = "source-builds.toml"
        recipes = _model(
            Recipes,
            "hf-stack.toml",
            {
                "root": root,
                "flavors": flavors,
                "releases": releases,
                "torch": torch,
                "stacks": stacks,
                "build_tools": build_tools,
                "source_builds": tuple(_model(SourceBuild, f"{where} [[build]]", b) for b in sources["build"]),
                "source_pins": tuple(_model(SourcePin, f"{where} [[source]]", p) for p in sources.get("source", [])),
                "evidence": tuple(_model(CellRecord, f"{where} [[evidence]]", e) for e in sources.get("evidence", [])),
                "failures": tuple(_model(CellRecord, f"{where} [[failure]]", f) for f in sources.get("failure", [])),
                "steps": _model(EvidenceSteps, f"{where} [step]", sources["step"]),
                "digest": _digest(root),
            },
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise RecipeError(f"invalid recipe data under {root}: {type(exc).__name__} {exc}") from None
    for name, f in flavors.items():
        if not f.versioned and len(releases[name]) != 1:  # nothing on the command line could pick one of several
            raise RecipeError(
                f"{f.releases_file}: the {name} flavor takes no version, so it has exactly one "
                f"[release.*] table, not {len(releases[name])}"
            )
    for name, by_version in releases.items():
        default = flavors[name].default_arch
        if missing := sorted(v for v, r in by_version.items() if r.archs and default not in r.archs):
            raise RecipeError(
                f"flavors.toml [flavor.{name}] default_arch {default!r} is not an arch of {flavors[name].label} "
                f"{', '.join(missing)}: the default is one rule for every release"
            )
        for version, release in by_version.items():
            if release.pip_accel is not None and (not release.archs or release.source_build):
                raise RecipeError(
                    f'{flavors[name].releases_file} [release."{version}"]: a pip_accel release installs '
                    f"one arch's wheels (archs must be listed) and has no source build (source_build = false)"
                )
    for line, t in torch.items():
        if line not in stacks:
            raise RecipeError(f'hf-stack.toml has no [stack."{line}"] for torch line {line}')
        if unknown := set(t.flavors) - set(flavors):
            raise RecipeError(f"torch.toml [{line}] names unknown flavors {sorted(unknown)}")
        for flavor in t.flavors:
            if (
                "source" in flavors[flavor].torch_sources
                and not t.wheel_only
                and not (recipes.patches_dir(line) / "series").exists()
            ):
                raise RecipeError(f"torch line {line} can be built from source but has no patches/torch-{line}/series")
        recipes.patch_series(line)  # validates the series now, not at the first render
    for pin in recipes.source_pins:
        if pin.torch not in torch or pin.version != torch[pin.torch].version:
            raise RecipeError(
                f"source-builds.toml [[source]] torch {pin.torch}: builds {pin.version}, but torch.toml "
                f"pins {torch[pin.torch].version if pin.torch in torch else 'no such line'}"
            )
    source_builds = recipes.source_builds
    for build in source_builds:
        where = f"source-builds.toml [{build.flavor} {build.release} torch {build.torch}]"
        if build.flavor not in flavors or build.release not in releases[build.flavor] or build.torch not in torch:
            raise RecipeError(f"{where}: unknown flavor, release or torch line")
        if build.version != torch[build.torch].version:
            raise RecipeError(
                f"{where}: builds {build.version}, but torch.toml pins {torch[build.torch].version} for "
                f"the line (the lock and the verify step expect that version)"
            )
    keys = [(b.flavor, b.release, b.torch) for b in source_builds]
    if len(set(keys)) != len(keys):
        raise RecipeError("source-builds.toml lists one (flavor, release, torch) twice")
    _check_cell_count(recipes)
    return recipes


def _check_cell_count(recipes: Recipes) -> None:
    """RecipeError when the recipes define more than MAX_CELLS cells (counted before any is resolved)."""
    count = 0
    for name, by_version in recipes.releases.items():
        lines = [recipes.torch[line] for line in recipes.torch_lines(name)]
        for release in by_version.values():
            pairs = sum(line.supports_python(python) for line in lines for python in release.pythons)
            count += pairs * max(len(release.archs), 1)
            if count > MAX_CELLS:
                raise RecipeError(
                    f'{recipes.flavors[name].releases_file} [release."{release.version}"]: the recipes define '
                    f"more than {MAX_CELLS} cells (flavor x release x torch line x arch x Python; {count} counted up "
                    "to this release): list fewer releases, archs or Pythons"
                )


load.cache_clear = _clear_cache  # tests that edit a recipes copy start from a fresh read
