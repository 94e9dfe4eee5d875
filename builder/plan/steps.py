"""The one step model: a plan's image as stages of steps, as data, which the Dockerfile and the Apptainer
definition templates only format. Each images/common script is named here and nowhere else in builder/ or
images/; adding a build step is one entry below (and its script)."""

from __future__ import annotations

from dataclasses import dataclass

from builder.plan.resolve import Plan

#: Where a step's script lies in the image, and the library every script sources (copied with the first
#: steps of the base stage, which every later stage starts from).
COMMON, LIB = "/opt/envbuild/common/", "lib.sh"
#: The build's last step: the image checks itself against expect.json (also its %test in a SIF).
VERIFY_SCRIPT, VERIFY_EXPECT = "verify_image.py", "/opt/envbuild/expect.json"
VERIFY_PATH = f"/opt/envbuild/{VERIFY_SCRIPT}"
#: What the first stage starts FROM: the pinned base image (a top-level ARG).
BASE_IMAGE = "${BASE_IMAGE}"


@dataclass(frozen=True)
class Copy:
    """A context file or directory (`src`, a directory ends in "/") copied into the image at `dest`, as a
    Dockerfile COPY reads it: a `dest` ending in "/" is the directory the file goes into."""

    src: str
    dest: str

    @property
    def path(self) -> str:
        """Where it lands in the image (the definition's %files target)."""
        if self.src.endswith("/"):
            return self.dest.rstrip("/")
        return self.dest + self.src.rsplit("/", 1)[-1] if self.dest.endswith("/") else self.dest


@dataclass(frozen=True)
class Bind:
    """A directory of an earlier stage the step reads, bind-mounted (Dockerfile) or copied in (`%files from`)."""

    stage: str
    source: str
    target: str


@dataclass(frozen=True)
class Step:
    """One images/common script run in a stage.

    `files`: context files copied before it; `libs`: the libraries (under images/common) copied with it;
    `args`: the build arguments it reads, declared (exported in the definition) just before it; `env`: the
    ENV it sets before it; `wheelhouse`: wheelhouse/ bind-mounted at /wheelhouse; `binds`: directories of
    earlier stages; `cache`: (id, target) of a BuildKit cache mount; `fetches`: what it downloads ("" for an
    offline step; only these get the proxy CA secret and are listed in the manifest's fetch_steps); `comment`:
    a line written before it; `interpreter` runs the script, which is copied `into` that directory."""

    script: str
    argv: tuple[str, ...] = ()
    files: tuple[Copy, ...] = ()
    libs: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    wheelhouse: bool = False
    binds: tuple[Bind, ...] = ()
    cache: tuple[str, str] | None = None
    fetches: str = ""
    comment: str = ""
    interpreter: str = "bash"
    into: str = COMMON

    @property
    def path(self) -> str:
        """The script's path in the image."""
        return self.into + self.script

    @property
    def copies(self) -> tuple[Copy, ...]:
        """Everything copied for the step, in order: its files, its libraries, its script."""
        return self.files + tuple(Copy(f"common/{name}", self.into) for name in (*self.libs, self.script))


@dataclass(frozen=True)
class Arg:
    """A build argument a stage declares after FROM; `default`: written with its value again (so a builder
    that does not pass top-level ARG defaults on cannot fall back to another value), after `comment`."""

    name: str
    default: bool = False
    comment: tuple[str, ...] = ()


@dataclass(frozen=True)
class Stage:
    """A Dockerfile stage: FROM `base` (an earlier stage, or BASE_IMAGE), its ARGs, its steps. The last stage
    also has `env` (the image's runtime environment) and `verify`, run after the labels, that ENV and WORKDIR
    are set. `sif_comment`: the header
    of the Apptainer stage of this name where it says more than `comment` (that stage runs the whole chain)."""

    name: str
    base: str
    comment: tuple[str, ...]
    args: tuple[Arg, ...] = ()
    steps: tuple[Step, ...] = ()
    verify: Step | None = None
    env: tuple[tuple[str, str], ...] = ()
    sif_comment: tuple[str, ...] = ()

    @property
    def all_steps(self) -> tuple[Step, ...]:
        return self.steps + ((self.verify,) if self.verify else ())


@dataclass(frozen=True)
class SifStage:
    """An Apptainer stage: stages inherit nothing there, so it runs the whole `chain` of Dockerfile stages
    (base first) that its Dockerfile namesake starts from; what it takes from earlier stages comes with
    `%files from`."""

    name: str
    comment: tuple[str, ...]
    chain: tuple[Stage, ...] = ()

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(step for stage in self.chain for step in stage.all_steps)

    @property
    def files(self) -> tuple[Copy, ...]:
        """Every copy of the chain's steps, each target once, in step order."""
        seen: dict[str, Copy] = {}
        for step in self.steps:
            for copy in step.copies:
                seen.setdefault(copy.path, copy)
        return tuple(seen.values())

    @property
    def binds(self) -> tuple[Bind, ...]:
        """The chain's binds from earlier stages, by stage name."""
        return tuple(sorted({b for step in self.steps for b in step.binds}, key=lambda b: (b.stage, b.target)))

    @property
    def verify(self) -> Step | None:
        return self.chain[-1].verify

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        return self.chain[-1].env


def _base(plan: Plan) -> Stage:
    release = plan.release
    args = ["SOURCE_DATE_EPOCH"]
    steps = []
    if release.apt_key_fingerprint:
        args += ["ROCM_KEY_URL", "ROCM_KEY_FINGERPRINT"]
        steps.append(Step("refresh_apt_key.sh", libs=(LIB,), fetches="the ROCm apt signing key (fingerprint-checked)"))
    steps.append(Step("install_base.sh", libs=(LIB,), fetches="ca-certificates (apt)"))
    if release.amdgpu_install:
        args += ["ROCM_VERSION", "OS_CODENAME", "AMDGPU_INSTALL_VERSION"]
        steps.append(Step("install_rocm.sh", fetches="amdgpu-install and ROCm (apt; installer route only)"))
    if plan.os_packages:
        args.append("OS_PACKAGES")
        pinned = bool((plan.apt_pins or {}).get("build"))
        if pinned:
            args += ["ROCM_APT_BUILD", "ROCM_APT_BUILD_PACKAGES"]
        if plan.flavor.kernel_dbs and plan.cell.arch:
            args.append("MIOPEN_KDB_ARCH")
        how = "apt, pinned to one repository build" if pinned else "apt, unpinned"
        steps.append(Step("install_os_packages.sh", fetches=f"ROCm libraries a source build links ({how})"))
    args += ["PYTHON_VERSION", "SYSTEM_PYTHON", "PYTHON_PPA"]
    steps.append(
        Step(
            "install_python.sh",
            files=(Copy("venv.lock", "/opt/envbuild/"),),
            wheelhouse=True,
            fetches="Python (apt, deadsnakes) and the venv's pip/setuptools/wheel (hash-locked)",
        )
    )
    comment = ("the OS/accelerator userspace, Python and the venv every later stage uses",)
    return Stage("base", BASE_IMAGE, comment, tuple(Arg(a) for a in args), tuple(steps))


_INDEX = Arg("TORCH_INDEX_URL", default=True)
_INSTALL_TORCH = "install_torch.sh"
_TORCH_FETCH = "the official torch wheel (wheel route; by path with --no-index otherwise)"


def _torch_wheel(plan: Plan) -> Stage:
    steps = []
    if plan.accel_wheels is not None:
        steps.append(
            Step(
                "install_accel_wheels.sh",
                args=("ACCEL_REQUIREMENTS",),
                wheelhouse=True,
                fetches="the ROCm SDK wheels of the cell's arch (pip-ROCm route), from the torch index only",
                comment="the accelerator userspace as wheels for this cell's arch only (pip-ROCm route), "
                "from the torch index",
            )
        )
    steps.append(Step(_INSTALL_TORCH, argv=("/wheelhouse",), wheelhouse=True, fetches=_TORCH_FETCH))
    comment = ("the official wheel, by path when wheelhouse/ holds it, else from the index by exact version",)
    return Stage("torch-wheel", "base", comment, (Arg("TORCH_VERSION"), _INDEX), tuple(steps))


def _torch_src(plan: Plan) -> Stage:
    steps = (
        Step("install_build_tools.sh", fetches="compilers and git (apt)"),
        Step("fetch_torch_source.sh", fetches="the torch source and its submodules (git)"),
        Step(
            "apply_patches.sh",
            argv=("/opt/envbuild/patches", "/src/pytorch"),
            files=(Copy("patches/", "/opt/envbuild/patches/"),),
            fetches="the patch series' upstream commits (git) and published patches (https, sha256-checked)",
        ),
    )
    comment = (
        "the pinned source (tag, or the commit a peer built) with its submodules and the patch series",
        "applied (no build yet)",
    )
    args = tuple(Arg(a) for a in ("TORCH_GIT_URL", "TORCH_GIT_REF", "TORCH_GIT_COMMIT"))
    return Stage("torch-src", "base", comment, args, steps)


def _torch_source_build(plan: Plan) -> Stage:
    flavor = plan.flavor
    prepare = flavor.source_prepare or "no prepare step"
    build_args = ("TORCH_VERSION", *((flavor.arch_env,) if flavor.arch_env else ()))
    build_args += ("MAX_JOBS", "COMPILE_JOB_MEM_MB", "TORCH_SOURCE_PREPARE")
    steps = (
        Step(
            "install_torch_build_deps.sh",
            files=(Copy("torch-build.lock", "/opt/envbuild/"),),
            wheelhouse=True,
            fetches="cmake/ninja (hash-locked) and the tag's requirements.txt (pip)",
        ),
        # offline: every proxy variable points at a closed port (tests/plan/test_render.py checks it)
        Step(
            "build_torch.sh",
            args=build_args,
            env=tuple(sorted(flavor.build_env.items())),
            cache=(
                f"envbuild-ccache-{plan.cell.flavor}{plan.cell.accel_version or ''}-torch{plan.torch.line}",
                "/root/.cache/ccache",
            ),
        ),
    )
    comment = (
        "the build tools (hash-locked cmake/ninja, the tag's requirements.txt), then, offline,",
        f"{prepare} and bdist_wheel with the local version label; depends only on what",
        "torch needs (no requirements.lock), so a change to the HF stack rebuilds no torch",
    )
    sif_comment = (
        "the pinned source (tag, or the commit a peer built) with its submodules and the patch",
        f"series, the build tools, then, offline, {prepare} and bdist_wheel into /torch-dist",
    )
    args = (Arg("TORCH_BUILD_PINS"),)
    return Stage("torch-source-build", "torch-src", comment, args, steps, sif_comment=sif_comment)


def _torch_source(plan: Plan) -> Stage:
    step = Step(
        _INSTALL_TORCH,
        argv=("/torch-dist",),
        wheelhouse=True,
        binds=(Bind("torch-source-build", "/torch-dist", "/torch-dist"),),
        fetches=_TORCH_FETCH,
    )
    comment = (
        "the base plus the wheel built above, installed by path with no index (bind-mounted, so",
        "the wheel file adds no layer) without its dependencies: the runtime stage installs them from the lock",
    )
    return Stage("torch-source", "base", comment, (Arg("TORCH_VERSION"),), (step,))


def _torch_compile(plan: Plan) -> Stage:
    step = Step(
        "install_torch_compile.sh",
        wheelhouse=True,
        fetches="torch.compile's backend for a source-built torch (pytorch-triton-rocm, by version)",
    )
    comment = (
        f"torch.compile's backend for the source-built torch, the {plan.flavor.compile_package} the official",
        "wheel of the same release requires (recipes/torch.toml), by exact version from the PyTorch index, without its",
        "dependencies (they are in the lock); a stage after the torch build, so changing it rebuilds no torch",
    )
    return Stage("torch-compile", "torch-source", comment, (Arg("TORCH_COMPILE_PACKAGE"), _INDEX), (step,))


def _sentencepiece(plan: Plan) -> Stage:
    step = Step(
        "build_sentencepiece.sh",
        files=(Copy("sentencepiece.lock", "/opt/envbuild/"),),
        wheelhouse=True,
        fetches="build tools (apt) and the sentencepiece sdist (hash-locked)",
    )
    comment = ("built from source (--no-binary) with cmake, pkg-config and g++; only the wheel is used later",)
    return Stage("sentencepiece", "base", comment, (Arg("SENTENCEPIECE_VERSION"),), (step,))


def _runtime(plan: Plan) -> Stage:
    stack = Step(
        "install_python_stack.sh",
        files=(Copy("requirements.lock", "/opt/envbuild/requirements.lock"),),
        wheelhouse=True,
        binds=(Bind("sentencepiece", "/dist/sentencepiece", "/sentencepiece"),),
        fetches="the locked stack (hash-locked) and what torch needs from its index",
    )
    verify = Step(
        VERIFY_SCRIPT,
        argv=(VERIFY_EXPECT, "/opt/envbuild/verify.json"),
        files=(Copy("workload/", "/opt/envbuild/workload/"), Copy("expect.json", "/opt/envbuild/")),
        interpreter="python",
        into="/opt/envbuild/",
    )
    index = Arg(
        "TORCH_INDEX_URL",
        default=True,
        comment=(
            "the index of what torch still needs beyond the lock (e.g. pytorch-triton-rocm): its default is written here,",
            "not only inherited from the top-level ARG, so a builder without that inheritance cannot fall back to PyPI",
        ),
    )
    comment = (
        "torch, then the pinned stack from requirements.lock, labels, the workload; last, the image",
        f"proves itself ({VERIFY_SCRIPT} checks torch, its backend and arch list, sentencepiece and every pin)",
    )
    torch = "torch" + (" (the wheel built above, by path)" if "torch-source" in plan.stages else "")
    torch += " and torch.compile's backend" if "torch-compile" in plan.stages else ""
    sif_comment = (
        f"the base, {torch}, then the pinned",
        f"stack from requirements.lock, labels, the workload; last, the image proves itself ({VERIFY_SCRIPT} checks",
        "torch, its backend and arch list, sentencepiece and every pin), and again in %test",
    )
    env = {"PYTHONPATH": "/opt/envbuild"}
    if plan.compile_unavailable:  # the workload reads this and runs eager, saying why (docs/rocm-route.md)
        env["ENVBUILD_TORCH_COMPILE_UNAVAILABLE"] = plan.compile_unavailable
    if plan.compile_needs_gpu:  # ... and this on a host with no GPU only (a known regression of the wheel)
        env["ENVBUILD_TORCH_COMPILE_NEEDS_GPU"] = plan.compile_needs_gpu
    return Stage("runtime", plan.torch_stage, comment, (index,), (stack,), verify, tuple(env.items()), sif_comment)


_STAGES = {
    "base": _base,
    "torch-wheel": _torch_wheel,
    "torch-src": _torch_src,
    "torch-source-build": _torch_source_build,
    "torch-source": _torch_source,
    "torch-compile": _torch_compile,
    "sentencepiece": _sentencepiece,
    "runtime": _runtime,
}


def stages(plan: Plan) -> tuple[Stage, ...]:
    """The Dockerfile's stages of the plan, in build order."""
    return tuple(_STAGES[name](plan) for name in plan.stages)


def plan_steps(plan: Plan) -> tuple[Step, ...]:
    """Every step of the plan's image, in Dockerfile order."""
    return tuple(step for stage in stages(plan) for step in stage.all_steps)


def fetch_steps(plan: Plan) -> dict[str, str]:
    """The steps that may use the network -> what each fetches (the manifest's fetch_steps)."""
    return {step.script: step.fetches for step in plan_steps(plan) if step.fetches}


def scripts(plan: Plan) -> set[str]:
    """The images/common files the plan's image copies (scripts and their libraries)."""
    return {name for step in plan_steps(plan) for name in (*step.libs, step.script)}


def sif_stages(plan: Plan) -> tuple[SifStage, ...]:
    """The Apptainer stages: the final stage and every stage a later one binds from, each with its chain."""
    by_name = {stage.name: stage for stage in stages(plan)}
    bound = {bind.stage for stage in by_name.values() for step in stage.steps for bind in step.binds}
    result = []
    for stage in by_name.values():
        if stage.name not in bound and stage.verify is None:
            continue
        chain = [stage]
        while chain[0].base != BASE_IMAGE:
            chain.insert(0, by_name[chain[0].base])
        result.append(SifStage(stage.name, stage.sif_comment or stage.comment, tuple(chain)))
    return tuple(result)
