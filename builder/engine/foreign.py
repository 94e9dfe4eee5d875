"""An image or SIF envbuild did not build, measured as it is: probe it, bring in what the workload lacks, read-only.

The probe runs the image's own Python (no network) and reads its Python, its torch (version, HIP/CUDA build,
where it lives), the ROCm release under /opt/rocm and every installed distribution. What the workload needs
and the image lacks is taken from the project's lock for the image's torch line and Python
(recipes/locks/torch<line>-py<python>.txt), installed here with pip into a `--target` folder (`--no-deps`,
hash-checked, binary wheels for the image's Python and platform) and mounted read-only beside a copy of
workload/. Only distributions the image lacks go in, so nothing of the image (torch, ROCm, its libraries) is
shadowed or replaced; nothing is downloaded inside the container.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

import workload
from builder.engine.container import RunError
from builder.engine.doctor import kfd_gpus, nvidia_gpus
from builder.engine.run_output import MAX_PROBE_OUTPUT
from builder.engine.runner import Said
from builder.paths import IMAGE_OUT
from builder.plan import lock as lockfile
from builder.plan import recipes
from builder.plan.lock_names import LockError, lock_key
from builder.slug import escaped

SRC_MOUNT, DEPS_MOUNT = "/envbuild/src", "/envbuild/deps"
PROBE_MARK = "ENVBUILD-PROBE "
#: Seconds a probe may take by default (--probe-timeout): importing torch from a cold network file system takes
#: a minute or two at HPC sites.
PROBE_TIMEOUT = 300.0
#: Run by the image's Python: what it holds, as one JSON line. Reads files only; imports torch, nothing else.
PROBE_SCRIPT = r"""
import importlib.metadata as md, json, platform, re, sys
out = {"python": platform.python_version(), "machine": platform.machine(), "libc": list(platform.libc_ver()),
       "executable": sys.executable, "distributions": {}, "torch": None, "torch_error": None, "rocm_release": None}
for dist in md.distributions():
    name = dist.metadata["Name"]
    if name:
        out["distributions"][re.sub(r"[-_.]+", "-", name).lower()] = dist.version
try:
    import torch
    out["torch"] = {"version": torch.__version__, "hip": torch.version.hip, "cuda": torch.version.cuda,
                    "file": torch.__file__}
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"[:500]
try:
    with open("/opt/rocm/.info/version") as handle:
        out["rocm_release"] = handle.read().strip()[:64] or None
except OSError:
    pass
print("ENVBUILD-PROBE " + json.dumps(out))
"""
#: Distributions never brought in: torch and what comes from torch's own index (they belong to the image).
_NEVER = {"torch", "pip", "setuptools", "wheel"}
_VERSION = r"[0-9][A-Za-z0-9.+!_-]{0,63}"


class ForeignError(RunError):
    """The image cannot be measured as it is (no Python, no torch, no lock, a package that cannot be brought in)."""


class TorchSeen(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str = Field(pattern=rf"^{_VERSION}$")
    hip: str | None = Field(default=None, pattern=rf"^{_VERSION}$")
    cuda: str | None = Field(default=None, pattern=rf"^{_VERSION}$")
    file: str = Field(max_length=1000)


class Probe(BaseModel):
    """What the probe read inside the image (the door for its output: nothing unchecked goes further)."""

    model_config = ConfigDict(extra="forbid")
    python: str = Field(pattern=r"^3\.[0-9]{1,2}\.[0-9]{1,3}[A-Za-z0-9+]*$")
    machine: str = Field(pattern=r"^[A-Za-z0-9_]{1,32}$")
    libc: list[str] = Field(max_length=2)
    executable: str = Field(max_length=1000)
    distributions: dict[str, str] = Field(max_length=5000)
    torch: TorchSeen | None
    torch_error: str | None = Field(default=None, max_length=600)
    rocm_release: str | None = Field(default=None, max_length=64)

    @property
    def flavor(self) -> str:
        """rocm, cuda or cpu: which build of torch the image holds (what it was built for, not what ran)."""
        return "rocm" if self.torch and self.torch.hip else "cuda" if self.torch and self.torch.cuda else "cpu"

    def line(self, version: str, parts: int = 2) -> str:
        return ".".join(version.split("+")[0].split(".")[:parts])

    def block(self) -> dict:
        """What the result's image block records of the probe."""
        return {
            "python": self.python,
            "machine": self.machine,
            "torch": self.torch.version if self.torch else None,
            "torch_hip": self.torch.hip if self.torch else None,
            "torch_cuda": self.torch.cuda if self.torch else None,
            "torch_path": self.torch.file if self.torch else None,
            "rocm_release": self.rocm_release,
        }


def probe_bounds(where: str, over: bool, late: bool, timeout: float) -> None:
    """ForeignError when the probe printed more than it may (`over`) or did not end within `timeout` (`late`)."""
    if over:
        raise ForeignError(
            f"{where}: the probe printed more than {MAX_PROBE_OUTPUT} bytes (its answer is one line of about 30 KB); "
            "envbuild stopped it. The image's Python prints something else first: pass --python with the "
            "interpreter that has torch"
        )
    if late:
        raise ForeignError(
            f"{where}: the probe did not answer within {timeout:g} s; envbuild stopped it. A slow file system? "
            "Raise --probe-timeout; else pass --python with the interpreter that has torch"
        )


def parse_probe(output: str, where: str) -> Probe:
    """The probe's JSON line from `output`; ForeignError when there is none or it is not a probe. Text of the
    image's in a message is escaped (slug.escaped): it never steers the terminal."""
    lines = [line[len(PROBE_MARK) :] for line in output.splitlines() if line.startswith(PROBE_MARK)]
    if not lines:
        tail = escaped(output.strip()[-600:])
        raise ForeignError(
            f"{where}: its Python did not answer the probe ({tail or 'no output'}); pass --python "
            "with the interpreter that has torch"
        )
    try:
        probe = Probe.model_validate(json.loads(lines[-1]))
    except (ValueError, ValidationError) as exc:
        raise ForeignError(
            f"{where}: the probe's output is not understood ({escaped(str(exc).splitlines()[0][:300])})"
        ) from None
    if probe.torch is None:
        raise ForeignError(
            f"{where}: its Python ({escaped(probe.executable)}) has no usable torch ({escaped(str(probe.torch_error))}); "
            "pass --python with the interpreter that has torch"
        )
    return probe


def probe_command(python: str) -> list[str]:
    return [python, "-I", "-c", PROBE_SCRIPT]


def check_python(python: str) -> str:
    """--python: an interpreter name or absolute path inside the image (it becomes an argv element)."""
    if not re.fullmatch(r"(/[A-Za-z0-9._+-]+)+|[A-Za-z0-9._+-]{1,64}", python or "") or len(python) > 500:
        raise ForeignError(
            f"--python {python[:80]!r}: give an interpreter name (python3) or an absolute path inside the image"
        )
    return python


def lacking(probe: Probe, site_recipes: Path | None = None) -> tuple[str, list[lockfile.Entry]]:
    """(lock key, the locked distributions the image lacks) for the image's torch line and Python, in the packaged
    locks with the site's recipe folder `site_recipes` over them."""
    line, python = probe.line(probe.torch.version), probe.line(probe.python)
    loaded = recipes.load(site=site_recipes)
    try:
        if line not in loaded.torch:
            raise LockError(f"the recipes know no torch {line} line", "missing")
        lock = lockfile.read(loaded, line, python)
    except LockError as exc:
        raise ForeignError(
            f"the image's torch {probe.torch.version} / Python {probe.python} has no locked stack "
            f"to complete it with ({exc}); install the workload's packages (transformers, peft, "
            "accelerate, sentencepiece) in the image, or run a Python whose lock exists "
            f"({', '.join(sorted(p.stem for p in (loaded.root / 'locks').glob('*.txt')))})"
        ) from None
    never = _NEVER | set(lock.from_torch_index)
    missing = [e for e in lock.entries("stack") if e.name not in never and e.name not in probe.distributions]
    return lock_key(line, python), missing


def _platforms(probe: Probe) -> list[str]:
    """pip --platform tags the image's glibc and machine can load (manylinux_2_17 up to its glibc)."""
    libc, version = (probe.libc + ["", ""])[:2]
    machine = probe.machine
    minor = int(version.split(".")[1]) if libc == "glibc" and re.fullmatch(r"2\.[0-9]+", version) else 17
    tags = [f"manylinux_2_{m}_{machine}" for m in range(minor, 4, -1)]
    return tags + [f"manylinux2014_{machine}", f"manylinux2010_{machine}", f"manylinux1_{machine}", f"linux_{machine}"]


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envbuild" / "deps"


def bring_in(probe: Probe, key: str, missing: list[lockfile.Entry], wheels: Path | None) -> Path | None:
    """A folder holding exactly `missing` for the image's Python and platform (cached by what it holds), or None
    when nothing is missing; ForeignError naming the packages when pip cannot get them here."""
    if not missing:
        return None
    requirements = "".join(e.requirement() + "\n" for e in missing)
    py = probe.line(probe.python).replace(".", "")
    platforms = _platforms(probe)
    source = ["--no-index", "--find-links", str(Path(wheels).resolve())] if wheels else []
    digest = hashlib.sha256(json.dumps([requirements, py, platforms]).encode()).hexdigest()[:20]
    target = cache_root() / f"{key}-{digest}"
    if (target / ".complete").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".bring-", dir=target.parent))
    try:
        (work / "requirements.txt").write_text(requirements)
        argv = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--require-hashes",
            "--only-binary",
            ":all:",
            "--target",
            str(work / "deps"),
            "--python-version",
            py,
            "--implementation",
            "cp",
            "--abi",
            f"cp{py}",
            "--abi",
            "abi3",
            "--abi",
            "none",
            *[arg for tag in platforms for arg in ("--platform", tag)],
            *source,
            "-r",
            str(work / "requirements.txt"),
        ]
        proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", timeout=1800)
        if proc.returncode != 0:
            names = ", ".join(f"{e.name}=={e.version}" for e in missing)
            where = f"from --wheels {wheels}" if wheels else "here (no PyPI?)"
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ForeignError(
                f"the image lacks {names} (the workload's packages from recipes/locks/{key}.txt) and pip could not "
                f"get them {where}: {tail[0][:300]}. Put their wheels for Python {probe.python} ({probe.machine}) in "
                f"a folder and pass --wheels DIR (`pip download --no-deps --only-binary :all: --python-version {py} "
                f"-d DIR {' '.join(f'{e.name}=={e.version}' for e in missing)}` where PyPI is reachable), or install "
                "them in the image"
            )
        deps = work / "deps"
        if (deps / "torch").exists():  # --no-deps of a lock without torch: cannot happen unless the lock is wrong
            raise ForeignError(f"bringing in {key}'s packages would add a torch; refusing to shadow the image's own")
        for path in [deps, *deps.rglob("*")]:  # readable by whoever the container runs as
            path.chmod(0o755 if path.is_dir() else 0o644)
        (deps / ".complete").write_text(requirements)
        try:
            os.replace(deps, target)
        except OSError:
            if not (target / ".complete").is_file():
                raise
            # another run (a job array's task, a second shell) brought in the same packages meanwhile: use theirs
        return target
    except OSError as exc:
        raise ForeignError(f"cannot prepare the packages to bring in under {target.parent}: {exc}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def copy_workload(beside: Path) -> Path:
    """A read-only copy of this envbuild's workload/ package in a new folder beside `beside` (its SRC_MOUNT)."""
    src = Path(tempfile.mkdtemp(prefix=".envbuild-src-", dir=beside))
    shutil.copytree(
        Path(workload.__file__).parent, src / "workload", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    for path in [src, *src.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    return src


def remove_copy(src: Path) -> None:
    for path in [src, *src.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
    shutil.rmtree(src, ignore_errors=True)


def remove_work(work: Path) -> None:
    """Remove a run's work folder on this host, its read-only copies included; a link in it (a venv's code may have
    made one in its home there) is removed, never followed."""
    for path in [work, *work.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(work, ignore_errors=True)


def online(network: str | None) -> bool:
    """Whether the run may reach a network: --network given and not `none`."""
    return network not in (None, "none")


def run_environment(network: str | None) -> dict[str, str]:
    """Environment of the workload in a foreign image: its copy and the brought-in packages importable (after
    nothing of the image: only what the image lacks is there), no bytecode written into them, offline unless
    --network (other than none)."""
    env = {
        "PYTHONPATH": f"{SRC_MOUNT}:{DEPS_MOUNT}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONUNBUFFERED": "1",
        "HOME": "/tmp",
    }
    if not online(network):
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PIP_NO_INDEX="1")
    return env


def image_out(out_dir: Path) -> Path:
    """The image's own folder in `out_dir` (IMAGE_OUT): made new for this run (a folder or link already there is
    refused: RunError), open to the same users as `out_dir` (the container may run as another user)."""
    folder = Path(out_dir) / IMAGE_OUT
    try:
        folder.mkdir(mode=0o700)
        folder.chmod(Path(out_dir).stat().st_mode & 0o7777)
    except FileExistsError:
        raise RunError(
            f"{folder} exists from an earlier run: pass a fresh --out directory (an image writes only into a "
            "folder envbuild made for it)"
        ) from None
    return folder


#: What a foreign run's record rests on the image's word alone for (`checked.from_image_only`; the versions must
#: at least agree with the probe's, and a GPU claim with the host: builder.workflows.run_identity).
FROM_IMAGE_ONLY = (
    "versions",
    "image.probe",
    "hardware.gpu_name",
    "hardware.arch of an NVIDIA GPU",
    "metrics",
    "probes",
    "model",
    "dataset",
)


def image_record(
    probe: Probe, key: str, missing: list[lockfile.Entry], image: dict, host_gpus: dict, devices: str, gpus
) -> dict:
    """The result image block's foreign part: origin, the vendor label its digest earns (builder.plan.image_origin),
    the probe, what was brought in, and `checked`: what this host checked itself (the GPUs it sees, the devices it
    passed into the container, the image's digest as the engine or the file reports it) apart from what only the
    image says."""
    from builder.plan.image_origin import vendor_label

    return {
        "origin": "foreign",
        "vendor": vendor_label(image),
        "probe": probe.block(),
        "brought_in": {"lock": key, "packages": {e.name: e.version for e in missing}},
        "checked": {
            "by_host": {
                "digest": image.get("digest"),
                "repo_digests": image.get("repo_digests") or [],
                "gpus_seen": host_gpus,
                "devices_passed": devices,
                "gpus": gpus,
            },
            "from_image_only": list(FROM_IMAGE_ONLY),
        },
    }


def host_gpus(host) -> dict:
    """The GPUs this host shows the doctor, one entry each: AMD archs from the KFD topology, NVIDIA models from the
    driver."""
    return {"amd": [g.arch for g in kfd_gpus(host)], "nvidia": nvidia_gpus(host)}


def host_flavor(flavor: str, host_root: Path = Path("/")) -> str:
    """The device the run can use for a torch built for `flavor`: its own kind when this host has such GPUs
    (/dev/kfd for ROCm, /dev/nvidiactl for CUDA), else cpu (the run is a CPU measurement of that build)."""
    device = {"rocm": "dev/kfd", "cuda": "dev/nvidiactl"}.get(flavor)
    return flavor if device and (host_root / device).exists() else "cpu"


def prepare(
    notify, seen: Probe, what: str, made: str, whose: str, request, host_root: Path
) -> tuple[str, list[lockfile.Entry], Path | None, str]:
    """Say what is brought into `what` (an image or a SIF envbuild did not build; runner.Said to `notify`), bring it
    in, and pick the flavor this host runs its torch as: (lock key, missing entries, the folder they are in or None,
    flavor). A GPU build on a host without that GPU runs on the CPU (a CPU measurement of that build); --gpus is then
    bad input."""
    key, missing = lacking(seen, request.site_recipes)
    brought = (
        f" and {', '.join(f'{e.name}=={e.version}' for e in missing)} (recipes/locks/{key}.txt)" if missing else ""
    )
    notify(
        Said(
            f"{what} was not {made} by envbuild: torch {seen.torch.version} ({seen.flavor} build), "
            f"Python {seen.python}; bringing in the workload{brought}, read-only"
        )
    )
    deps = bring_in(seen, key, missing, request.wheels)
    flavor = host_flavor(seen.flavor, host_root)
    if flavor != seen.flavor:
        notify(
            Said(
                f"note: this host has no {seen.flavor.upper()} GPU: {whose} {seen.flavor} torch runs on "
                "the CPU, and the run is a CPU measurement of that build (never its GPU cell's verdict)"
            )
        )
        if request.gpus:
            raise RunError(f"--gpus {request.gpus}: this host has no GPU {whose} {seen.flavor} torch can use")
    return key, missing, deps, flavor
