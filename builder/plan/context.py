"""Plan -> template variables: every decision the Dockerfile encodes is computed here, not in Jinja."""

from __future__ import annotations

import json
import re

from builder import __version__
from builder.plan.lock import Lock
from builder.plan.resolve import Plan

_PLAIN = re.compile(r"^[A-Za-z0-9_.:/@+=,-]*$")
#: The label that names a context's content hash: in the Dockerfile's and cell.def's labels, and set again by the
#: build (`envbuild image`), so an image from a hand-made context carries it too.
CONTEXT_HASH_LABEL = "io.envbuild.context-hash"
#: The second name builds once set beside it; images built then carry both, and are still read by it.
LEGACY_CONTEXT_HASH_LABEL = "org.envbuild.context-hash"


def context_hash_of(labels: dict | None) -> str | None:
    """The content hash an image's labels name: CONTEXT_HASH_LABEL, else the legacy name; None when neither."""
    labels = labels or {}
    return labels.get(CONTEXT_HASH_LABEL) or labels.get(LEGACY_CONTEXT_HASH_LABEL) or None


#: The build steps that may use the network, and what each fetches (listed in the manifest). Every other
#: step -- the torch compile (build_torch.sh, with every proxy variable pointing at a closed port) and the
#: verify step -- works offline; tests/plan/test_render.py greps every RUN of the rendered contexts for network
#: tools outside these.
FETCH_STEPS = {
    "refresh_apt_key.sh": "the ROCm apt signing key (fingerprint-checked)",
    "install_base.sh": "ca-certificates (apt)",
    "install_rocm.sh": "amdgpu-install and ROCm (apt; installer route only)",
    "install_os_packages.sh": "ROCm libraries a source build links (apt)",
    "install_accel_wheels.sh": "the ROCm SDK wheels of the cell's arch (pip-ROCm route), from the torch index only",
    "install_python.sh": "Python (apt, deadsnakes) and the venv's pip/setuptools/wheel (hash-locked)",
    "install_build_tools.sh": "compilers and git (apt)",
    "fetch_torch_source.sh": "the torch source and its submodules (git)",
    "apply_patches.sh": "upstream fix commits of the patch series (git)",
    "install_torch_build_deps.sh": "cmake/ninja (hash-locked) and the tag's requirements.txt (pip)",
    "install_torch.sh": "the official torch wheel (wheel route; by path with --no-index otherwise)",
    "install_torch_compile.sh": "torch.compile's backend for a source-built torch (pytorch-triton-rocm, by version)",
    "build_sentencepiece.sh": "build tools (apt) and the sentencepiece sdist (hash-locked)",
    "install_python_stack.sh": "the locked stack (hash-locked) and what torch needs from its index",
}


def _quote(value: str) -> str:
    """A Dockerfile ARG/LABEL value: bare when safe, else a double-quoted JSON string."""
    return value if value and _PLAIN.match(value) else json.dumps(value)


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
        args["OS_PACKAGES"] = " ".join(plan.os_packages)
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
    if plan.compile_unavailable:
        values["io.envbuild.torch-compile"] = f"unavailable: {plan.compile_unavailable}"
    if accel := plan.accel_wheels:
        values["io.envbuild.accel-wheels"] = " ".join(accel["requirements"])
    return dict(sorted(values.items()))


def template_vars(plan: Plan, context_hash: str, lock: Lock) -> dict:
    """Everything images/Dockerfile.j2, images/cell.def.j2 and their partials read: each value once, as the
    Dockerfile writes it (quoted for ARG/LABEL/ENV lines) and as plain values (`*_values`, which the
    definition file quotes for the shell itself)."""
    args = build_args(plan)
    base_args = ["SOURCE_DATE_EPOCH"]
    if plan.release.apt_key_fingerprint:
        base_args += ["ROCM_KEY_URL", "ROCM_KEY_FINGERPRINT"]
    if plan.release.amdgpu_install:
        base_args += ["ROCM_VERSION", "OS_CODENAME", "AMDGPU_INSTALL_VERSION"]
    if plan.os_packages:
        base_args.append("OS_PACKAGES")
        if "MIOPEN_KDB_ARCH" in args:
            base_args.append("MIOPEN_KDB_ARCH")
    base_args += ["PYTHON_VERSION", "SYSTEM_PYTHON", "PYTHON_PPA"]
    runtime_env = {"PYTHONPATH": "/opt/envbuild"}
    if plan.compile_unavailable:  # the workload reads this and runs eager, saying why (docs/rocm-route.md)
        runtime_env["ENVBUILD_TORCH_COMPILE_UNAVAILABLE"] = plan.compile_unavailable
    if plan.compile_needs_gpu:  # ... and this on a host with no GPU only (a known regression of the wheel)
        runtime_env["ENVBUILD_TORCH_COMPILE_NEEDS_GPU"] = plan.compile_needs_gpu
    label_values = labels(plan, context_hash, lock)
    return {
        "cell_key": plan.cell.key,
        "base_image": plan.base_image,
        "arg_values": args,
        "runtime_env_values": runtime_env,
        "build_env_values": dict(sorted(plan.flavor.build_env.items())),
        "label_values": label_values,
        "stages": list(plan.stages),
        "args": [f"{name}={_quote(value) if value else ''}" for name, value in args.items()],
        "base_args": base_args,
        "apt_key_step": bool(plan.release.apt_key_fingerprint),
        "tool_path": plan.flavor.tool_path,
        "library_path": plan.flavor.library_path,
        "accel_install_step": bool(plan.release.amdgpu_install),
        "accel_wheels_step": plan.accel_wheels is not None,
        "os_packages_step": bool(plan.os_packages),
        "torch_build_args": ["TORCH_BUILD_PINS"],
        "runtime_env": [f"{k}={_quote(v)}" for k, v in runtime_env.items()],
        "torch_stage": plan.torch_stage,
        "torch_index_url": plan.wheel_index_url,
        "compile_package": plan.flavor.compile_package,
        "arch_env": plan.flavor.arch_env,
        "build_env": [f"{k}={_quote(v)}" for k, v in sorted(plan.flavor.build_env.items())],
        "source_prepare": plan.flavor.source_prepare,
        "ccache_id": f"{plan.cell.flavor}{plan.cell.accel_version or ''}-torch{plan.torch.line}",
        "labels": [f"{k}={_quote(v)}" for k, v in label_values.items()],
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
    """expect.json: what images/common/verify_image.py checks at the end of the build."""
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
