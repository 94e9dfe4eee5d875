"""Plan -> template variables, labels, locks and expect.json: every decision the recipes encode is computed here
and in builder.plan.steps (the stages and their steps), not in Jinja."""

from __future__ import annotations

from builder import __version__
from builder.plan import steps
from builder.plan.lock import Lock
from builder.plan.resolve import Plan

#: The label that names a context's content hash: in the Dockerfile's and cell.def's labels, and set again by the
#: build (`envbuild image`), so an image from a hand-made context carries it too.
CONTEXT_HASH_LABEL = "io.envbuild.context-hash"
#: The second name builds once set beside it; images built then carry both, and are still read by it.
LEGACY_CONTEXT_HASH_LABEL = "org.envbuild.context-hash"


def context_hash_of(labels: dict | None) -> str | None:
    """The content hash an image's labels name: CONTEXT_HASH_LABEL, else the legacy name; None when neither."""
    labels = labels or {}
    return labels.get(CONTEXT_HASH_LABEL) or labels.get(LEGACY_CONTEXT_HASH_LABEL) or None


def build_args(plan: Plan) -> dict[str, str]:
    """Top-level ARGs (name -> default) in Dockerfile order; every pin of the plan is one."""
    release = plan.release
    args = {"BASE_IMAGE": plan.base_image, "SOURCE_DATE_EPOCH": str(plan.build_tools.source_date_epoch)}
    if release.apt_key_fingerprint:
        args |= {"ROCM_KEY_URL": release.apt_key_url, "ROCM_KEY_FINGERPRINT": release.apt_key_fingerprint}
    if release.amdgpu_install:  # the flavor has an installer route (ubuntu + amdgpu-install)
        args |= {
            "ROCM_VERSION": release.version,
            "OS_CODENAME": release.codename,
            "AMDGPU_INSTALL_VERSION": plan.amdgpu_install,
        }
    if plan.os_packages:
        pins = plan.apt_pins
        args["OS_PACKAGES"] = " ".join(f"{p}={pins['exact'][p]}" if p in pins["exact"] else p for p in plan.os_packages)
        if pins["build"]:  # the OS-package step takes these at the version of that build
            args |= {"ROCM_APT_BUILD": pins["build"], "ROCM_APT_BUILD_PACKAGES": " ".join(pins["by_build"])}
        if plan.flavor.kernel_dbs and plan.cell.arch:
            args["MIOPEN_KDB_ARCH"] = plan.cell.arch
    args |= {
        "PYTHON_VERSION": plan.cell.python,
        "SYSTEM_PYTHON": release.system_python,
        "PYTHON_PPA": release.python_ppa,
        "TORCH_VERSION": plan.torch_version,
        "TORCH_INDEX_URL": plan.wheel_index_url,
    }
    if accel := plan.accel_wheels:
        args["ACCEL_REQUIREMENTS"] = " ".join(accel["requirements"])
    if plan.compile_requirement:
        args["TORCH_COMPILE_PACKAGE"] = plan.compile_requirement
    if plan.torch_source == "source":
        git = plan.git_source
        args |= {"TORCH_GIT_URL": git["repo"], "TORCH_GIT_REF": git["ref"], "TORCH_GIT_COMMIT": git["commit"]}
        if plan.flavor.arch_env:
            args[plan.flavor.arch_env] = plan.cell.arch or ""
        args |= {
            "MAX_JOBS": "",
            "COMPILE_JOB_MEM_MB": str(plan.flavor.compile_job_mem_mb),
            "TORCH_SOURCE_PREPARE": plan.flavor.source_prepare,
            "TORCH_BUILD_PINS": _pins(plan.build_tools.torch_build),
        }
    args["SENTENCEPIECE_VERSION"] = plan.stack["sentencepiece"]
    return args


def _pins(pins: dict[str, str]) -> str:
    return " ".join(f"{name}=={version}" for name, version in sorted(pins.items()))


def labels(plan: Plan, context_hash: str, lock: Lock) -> dict[str, str]:
    """OCI labels plus io.envbuild.* labels (sorted); `context_hash` is "" while the hash is computed."""
    cell = plan.cell
    values = {
        "org.opencontainers.image.title": f"envbuild {cell.key}",
        "org.opencontainers.image.description": f"{plan.flavor.description} ({cell.key})",
        "org.opencontainers.image.version": __version__,
        "org.opencontainers.image.base.name": plan.base_image,
        "io.envbuild.cell": cell.key,
        "io.envbuild.flavor": cell.flavor,
        "io.envbuild.accel-version": cell.accel_version or "",
        "io.envbuild.arch": cell.arch or "",
        "io.envbuild.python": cell.python,
        "io.envbuild.torch": plan.torch_version,
        "io.envbuild.torch-source": plan.torch_source,
        "io.envbuild.evidence": plan.evidence_step,
        "io.envbuild.stack": ",".join(f"{k}=={v}" for k, v in sorted(plan.stack.items())),
        "io.envbuild.lock": f"{lock.key}@sha256:{lock.sha256}",
        "io.envbuild.patches": ",".join(f"{p.ref}={p.sha256 or p.url}" for p in plan.patches),
        "io.envbuild.recipe-hash": plan.recipe_hash,
        CONTEXT_HASH_LABEL: context_hash,
    }
    if plan.amdgpu_install:
        values["io.envbuild.amdgpu-install"] = plan.amdgpu_install
    if (git := plan.git_source) is not None:
        values["io.envbuild.torch-git"] = f"{git['repo']}@{git['commit'] or git['ref']}"
        values["io.envbuild.torch-git-origin"] = "fork" if git["fork"] else "upstream"
        values["io.envbuild.torch-proof"] = git["peer"] or "unproven"
        if git.get("tag_commit"):  # the release tag's own commit, when it is not the one built
            values["io.envbuild.torch-git-tag"] = f"{git['ref']}@{git['tag_commit']}"
    if plan.compile_unavailable:
        values["io.envbuild.torch-compile"] = f"unavailable: {plan.compile_unavailable}"
    if accel := plan.accel_wheels:
        values["io.envbuild.accel-wheels"] = " ".join(accel["requirements"])
    return dict(sorted(values.items()))


def template_vars(plan: Plan, context_hash: str, lock: Lock) -> dict:
    """Everything images/Dockerfile.j2 and images/cell.def.j2 read, each value once and unquoted (the templates
    quote for the Dockerfile or the shell): the stages and their steps (builder.plan.steps), the pins (ARG
    defaults), the labels."""
    return {
        "cell_key": plan.cell.key,
        "base_image": plan.base_image,
        "args": build_args(plan),
        "labels": labels(plan, context_hash, lock),
        "tool_path": plan.flavor.tool_path,
        "library_path": plan.flavor.library_path,
        "stages": steps.stages(plan),
        "sif_stages": steps.sif_stages(plan),
    }


def lock_files(plan: Plan, lock: Lock) -> dict[str, str]:
    """The context's pip requirements with hashes, one file per stage that installs (from recipes/locks/):
    venv.lock (base: the venv's pip/setuptools/wheel; only what the [venv] pins decide, no lock date),
    sentencepiece.lock (its sdist, built in its stage) and requirements.lock (runtime: everything else but
    torch, which its own stage installs)."""
    origin = f"recipes/locks/{lock.key}.txt (`envbuild lock`, exclude-newer {lock.header.get('exclude-newer', '?')})"
    # venv.lock is copied by the base stage, which every torch build stage starts from: it names no date and
    # nothing of the HF stack, so re-locking (a new exclude-newer, a new HF pin) leaves the torch build cached
    return {
        "venv.lock": f"# The venv's pip/setuptools/wheel, section [venv] of recipes/locks/{lock.key}.txt\n"
        + lock.requirements("venv"),
        "sentencepiece.lock": f"# The sentencepiece sdist built in its stage, from [stack] of {origin}\n"
        + lock.requirements("stack", {"sentencepiece"}),
        "requirements.lock": (
            f"# Python stack for {plan.cell.key}, section [stack] of {origin}.\n"
            f"# torch {plan.torch_version} comes from its own stage; what it needs beyond this file comes from its\n"
            "# index (listed in /opt/envbuild/from-torch-index.txt in the image).\n" + lock.requirements("stack")
        ),
    }


def expectations(plan: Plan, lock: Lock) -> dict:
    """expect.json: what the image's verify step checks at the end of the build."""
    release, accel = plan.release, plan.accel_wheels
    backend_version = release.version if plan.flavor.backend and plan.flavor.versioned else None
    if accel is not None:  # the wheels' HIP version is their own, not the release's (None: not verified)
        backend_version = accel["hip_version"]
    return {
        "cell": plan.cell.key,
        "flavor": plan.flavor.name,
        "backend": plan.flavor.backend,
        "backend_version": backend_version,
        "accel_wheels": None
        if accel is None
        else {k: accel[k] for k in ("packages", "device_packages", "device_prefixes")},
        "compile_needs_gpu": plan.compile_needs_gpu or None,
        "arch": plan.cell.arch,
        "torch": {"version": plan.torch_version, "by_path": plan.torch_source == "source"},
        "sentencepiece": plan.stack["sentencepiece"],
        "lock": lock.versions("stack"),
        "venv": lock.versions("venv"),
        "complete": True,
        "compile_unavailable": plan.compile_unavailable or None,
        "compile_package": _compile_package(plan),
    }


def _compile_package(plan: Plan) -> dict | None:
    """What verify checks of torch.compile's backend: installed at the pin, importable; None when none is."""
    if not plan.compile_requirement:
        return None
    name, version = plan.compile_requirement.split("==")
    return {"name": name, "version": version, "import": plan.flavor.compile_import}
