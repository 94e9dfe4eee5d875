"""Dependency locks (recipes/locks/): every distribution an image installs with pip, with its version and hashes.

One lock per (torch line, Python): `torch2.4-py3.10.txt`. It is data, written by `envbuild lock` (which
resolves against PyPI with uv) and read offline by `render`, which refuses a missing or stale one. A lock
has two sections:

- `[venv]`: the venv's own pip/setuptools/wheel (recipes/build-tools.toml [venv]), installed first;
- `[stack]`: recipes/hf-stack.toml's pins and their whole dependency closure, torch's own requirements
  included and torch itself left out (its stage installs the exact build, by path or by version).

torch's CUDA-build-only requirements are left out too: PyPI's torch wheel for Linux is a CUDA build, and
its metadata marks those requirements (nvidia-*, triton, cuda-*) with a Linux condition, which its portable
requirements (filelock, sympy, ...) lack. The CPU and ROCm wheels come from the PyTorch index with their
own accelerator packages (e.g. pytorch-triton-rocm); what the installed torch still needs after the lock
is installed from that index, named in the image and in `from-torch-index` here.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

from builder.paths import write_text_atomic
from builder.plan.lock_names import LockError, lock_key, lock_path
from builder.plan.recipes import Recipes, version_key
from builder.plan.resolve import all_plans

FORMAT = 1
#: The resolver's target: x86_64 Linux with glibc 2.35 (Ubuntu 22.04, the ROCm images; Debian 12 has 2.36).
PLATFORM = "x86_64-manylinux_2_35"
SECTIONS = ("venv", "stack")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
_HEADER = re.compile(r"# (inputs-sha256|exclude-newer|resolver|from-torch-index):(.*)")
_LINUX_ONLY = re.compile(r"sys_platform\s*==\s*['\"]linux['\"]|platform_system\s*==\s*['\"]Linux['\"]")


def normalize(name: str) -> str:
    """PEP 503 name: 'Typing_Extensions' -> 'typing-extensions'."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Entry:
    """One locked distribution."""

    name: str
    version: str
    hashes: tuple[str, ...]

    def requirement(self) -> str:
        """The pip requirement with every hash, one `--hash` per line (pip's hash-checking mode)."""
        return " \\\n    ".join([f"{self.name}=={self.version}", *(f"--hash=sha256:{h}" for h in self.hashes)])


@dataclass(frozen=True)
class Lock:
    """A parsed lock file."""

    key: str
    header: dict[str, str]
    sections: dict[str, tuple[Entry, ...]] = field(default_factory=dict)

    @property
    def from_torch_index(self) -> tuple[str, ...]:
        return tuple(self.header.get("from-torch-index", "").split())

    def entries(self, section: str) -> tuple[Entry, ...]:
        return self.sections.get(section, ())

    def versions(self, section: str) -> dict[str, str]:
        return {e.name: e.version for e in self.entries(section)}

    def requirements(self, section: str, names: set[str] | None = None) -> str:
        """`section` (or only `names` of it) as a pip requirements file for `--require-hashes`."""
        chosen = [e for e in self.entries(section) if names is None or e.name in names]
        return "".join(e.requirement() + "\n" for e in chosen)

    @cached_property
    def sha256(self) -> str:
        """Digest of what the lock pins (sections, entries, hashes); comments and formatting do not count."""
        data = {s: [[e.name, e.version, list(e.hashes)] for e in self.entries(s)] for s in SECTIONS}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def lock_command(line: str, python: str) -> str:
    return f"envbuild lock --torch {line} --python {python}"


def inputs(torch_version: str, python: str, stack: dict[str, str], venv: dict[str, str]) -> dict:
    """What a lock is resolved from; its sha256 is in the lock's header, so a changed pin makes it stale."""
    return {
        "format": FORMAT,
        "platform": PLATFORM,
        "python": python,
        "torch": torch_version,
        "stack": dict(sorted(stack.items())),
        "venv": dict(sorted(venv.items())),
    }


def inputs_sha256(torch_version: str, python: str, stack: dict[str, str], venv: dict[str, str]) -> str:
    data = inputs(torch_version, python, stack, venv)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _recipe_inputs(recipes: Recipes, line: str, python: str) -> tuple:
    return recipes.torch[line].version, python, recipes.stacks[line], recipes.build_tools.venv


def keys(recipes: Recipes) -> list[tuple[str, str]]:
    """(torch line, Python) of every known cell and of every line's measured Pythons: every lock the recipes need."""
    found = {(p.torch.line, p.cell.python) for p in all_plans(recipes)}
    found |= {(line, python) for line, torch in recipes.torch.items() for python in torch.measured_pythons}
    return sorted(found, key=lambda k: (version_key(k[0]), version_key(k[1])))


def parse(text: str, where: str) -> Lock:
    """Parse a lock file; LockError names FILE:LINE for anything that is not a lock."""
    header: dict[str, str] = {}
    sections: dict[str, list[Entry]] = {}
    section: str | None = None
    current: list | None = None  # [name, version, hashes] of the entry being read

    def finish(number: int) -> None:
        nonlocal current
        if current is not None:
            if not current[2]:
                raise LockError(f"{where}:{number}: {current[0]}=={current[1]} has no --hash lines")
            sections[section].append(Entry(current[0], current[1], tuple(current[2])))
        current = None

    lines = text.splitlines()
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if current is not None and line.startswith("--hash="):
            match = _HASH.fullmatch(line.rstrip(" \\").strip())
            if not match:
                raise LockError(f"{where}:{number}: expected --hash=sha256:<64 hex>, got {line[:80]!r}")
            current[2].append(match.group(1))
            continue
        finish(number)
        if not line:
            continue
        if line.startswith("# ["):
            name = line[3:].split("]", 1)[0]
            if name not in SECTIONS or name in sections:
                raise LockError(f"{where}:{number}: unknown or repeated section [{name}]")
            section, sections[name] = name, []
            continue
        if line.startswith("#"):
            field_match = _HEADER.fullmatch(line)
            if section is None and field_match:
                header[field_match.group(1)] = field_match.group(2).strip()
            continue
        if section is None:
            raise LockError(f"{where}:{number}: a requirement before the first section: {line[:80]!r}")
        spec = line.rstrip(" \\").strip()
        name, sep, version = spec.partition("==")
        if not sep or not _NAME.fullmatch(name) or not _VERSION.fullmatch(version):
            raise LockError(f"{where}:{number}: expected NAME==VERSION, got {line[:80]!r}")
        current = [normalize(name), version, []]
    finish(len(lines))
    missing = [s for s in SECTIONS if s not in sections]
    if missing or "inputs-sha256" not in header:
        raise LockError(f"{where}: not an envbuild lock (missing {', '.join(missing) or 'inputs-sha256 header'})")
    for name, entries in sections.items():
        dupes = sorted({e.name for e in entries if [x.name for x in entries].count(e.name) > 1})
        if dupes:
            raise LockError(f"{where}: [{name}] locks {', '.join(dupes)} twice")
    return Lock(key=Path(where).stem, header=header, sections={k: tuple(v) for k, v in sections.items()})


def read(recipes: Recipes, line: str, python: str) -> Lock:
    """The lock of (torch line, Python), checked against the recipes; LockError when missing or stale."""
    found = _recipe_inputs(recipes, line, python)
    return read_file(lock_path(recipes, line, python), line, python, inputs_sha256(*found), recipes.stacks[line])


def for_plan(plan) -> Lock:
    """The lock a resolved Plan installs (its `lock_path`), checked against the plan's pins."""
    digest = inputs_sha256(plan.torch.version, plan.cell.python, plan.stack, plan.build_tools.venv)
    return read_file(plan.lock_path, plan.torch.line, plan.cell.python, digest, plan.stack)


#: The hash-locked build tools of a torch source build (cmake, ninja), next to recipes/build-tools.toml.
TORCH_BUILD_LOCK = "torch-build.lock"


def read_build_tools_lock(path: Path, pins: dict[str, str]) -> str:
    """recipes/torch-build.lock, checked to pin exactly `pins` (build-tools.toml [torch_build]), each with
    hashes; LockError (missing/stale/invalid) otherwise. Returns the text, a pip requirements file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise LockError(f"{path} is missing: resolve it with the command in docs/rocm-route.md", "missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LockError(f"cannot read {path}: {exc}") from exc
    found: dict[str, list[str]] = {}
    current = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip().rstrip(" \\").strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("--hash="):
            match = _HASH.fullmatch(line)
            if current is None or not match:
                raise LockError(f"{path}:{number}: expected --hash=sha256:<64 hex> after a NAME==VERSION line")
            found[current].append(match.group(1))
            continue
        name, sep, version = line.partition("==")
        if not sep or not _NAME.fullmatch(name) or not _VERSION.fullmatch(version):
            raise LockError(f"{path}:{number}: expected NAME==VERSION, got {line[:80]!r}")
        current = f"{normalize(name)}=={version}"
        found[current] = []
    wanted = {f"{normalize(n)}=={v}" for n, v in pins.items()}
    if set(found) != wanted or not all(found.values()):
        raise LockError(
            f"{path} pins {', '.join(sorted(found)) or 'nothing'} but build-tools.toml [torch_build] "
            f"pins {', '.join(sorted(wanted))} (each with hashes); resolve it again with the command "
            f"in its header",
            "stale",
        )
    return text


def read_file(path: Path, line: str, python: str, digest: str, stack: dict[str, str]) -> Lock:
    command = lock_command(line, python)
    try:
        stat = path.stat()
        lock = _parsed(str(path), stat.st_mtime_ns, stat.st_size)
    except FileNotFoundError:
        raise LockError(
            f"no dependency lock for torch {line} / Python {python} ({path} is missing); "
            f"run `{command}` (needs PyPI) and commit the file",
            "missing",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LockError(f"cannot read the lock {path}: {exc}") from exc
    if lock.header["inputs-sha256"] != digest:
        raise LockError(
            f"{path} is stale: recipes/hf-stack.toml, torch.toml or build-tools.toml changed since it "
            f"was resolved; run `{command}` (needs PyPI) and commit the file",
            "stale",
        )
    locked = lock.versions("stack")
    wrong = {n: v for n, v in stack.items() if locked.get(normalize(n)) != v}
    if wrong:
        raise LockError(
            f"{path} does not hold the pins of hf-stack.toml ({', '.join(sorted(wrong))}); run `{command}`", "stale"
        )
    return lock


@lru_cache(maxsize=64)
def _parsed(path: str, mtime_ns: int, size: int) -> Lock:
    """A lock file parsed once per version of the file (rendering the matrix reads each lock many times)."""
    return parse(Path(path).read_text(), path)


# --- resolving (envbuild lock): uv pip compile against PyPI -------------------------------------------


_LOCK_NEEDS_UV = "`envbuild lock` resolves"


def uv_binary(missing: type[Exception], needed_for: str) -> str:
    """The uv executable of the `uv` package installed here; `missing` saying what `needed_for` uv when there is
    none (envbuild lock resolves with it, the managed workload environment is made with it)."""
    try:
        from uv import find_uv_bin
    except ImportError:
        raise missing(f"{needed_for} with uv, which is not installed here: pip install uv") from None
    return find_uv_bin()


def uv_version() -> str:
    out = subprocess.run(
        [uv_binary(LockError, _LOCK_NEEDS_UV), "--version"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() or "uv (unknown version)"


def _compile(requirements: str, python: str, exclude_newer: str, *extra: str, work: Path) -> str:
    """`uv pip compile` of `requirements` for the images' platform; the output text (LockError on failure)."""
    source = work / "requirements.in"
    source.write_text(requirements)
    command = [
        uv_binary(LockError, _LOCK_NEEDS_UV),
        "pip",
        "compile",
        str(source),
        "--quiet",
        "--no-header",
        "--python-version",
        python,
        "--exclude-newer",
        exclude_newer,
        "--no-config",
        "--no-python-downloads",
        *extra,
    ]
    proc = subprocess.run(command, capture_output=True, text=True, check=False, cwd=work)
    if proc.returncode != 0:
        detail = "\n".join(proc.stderr.strip().splitlines()[-12:])
        raise LockError(
            f"uv could not resolve for Python {python} (exclude-newer {exclude_newer}):\n{detail}", "resolve"
        )
    return proc.stdout.replace(str(source), "requirements.in")


def torch_index_requirements(version: str, python: str, exclude_newer: str, work: Path) -> list[str]:
    """The names PyPI's torch `version` requires on Linux only (its CUDA build's packages), transitively."""
    text = _compile(f"torch=={version}\n", python, exclude_newer, "--universal", "--no-annotate", work=work)
    names = set()
    for raw in text.splitlines():
        spec, _, marker = raw.partition(";")
        name = normalize(spec.split("==")[0].strip())
        if name and not raw.startswith((" ", "#")) and name != "torch" and _LINUX_ONLY.search(marker):
            names.add(name)
    return sorted(names)


def resolve_lock(recipes: Recipes, line: str, python: str, exclude_newer: str) -> str:
    """The lock file text of (torch line, Python), resolved now against the index uv is configured for."""
    if not _DATE.fullmatch(exclude_newer):
        raise LockError(f"--exclude-newer must look like 2026-12-02T00:00:00Z, got {exclude_newer!r}")
    torch = recipes.torch[line]
    stack = recipes.stacks[line]
    venv = recipes.build_tools.venv
    with tempfile.TemporaryDirectory(prefix="envbuild-lock-") as tmp:
        work = Path(tmp)
        from_index = torch_index_requirements(torch.version, python, exclude_newer, work)
        pins = "".join(f"{n}=={v}\n" for n, v in sorted(venv.items()))
        hashes = ("--generate-hashes", "--python-platform", PLATFORM)
        venv_text = _compile(pins, python, exclude_newer, "--no-deps", "--no-annotate", *hashes, work=work)
        overrides = work / "overrides.txt"
        overrides.write_text("".join(f"{n} ; sys_platform == 'never'\n" for n in from_index))
        wanted = "".join(f"{n}=={v}\n" for n, v in sorted(stack.items())) + f"torch=={torch.version}\n"
        stack_text = _compile(
            wanted,
            python,
            exclude_newer,
            *hashes,
            "--override",
            str(overrides),
            "--no-emit-package",
            "torch",
            work=work,
        )
    header = [
        f"# envbuild dependency lock: torch {line} line (torch {torch.version}), Python {python}, {PLATFORM}",
        f"# Written by `{lock_command(line, python)}` from recipes/hf-stack.toml and build-tools.toml; never edit it",
        "# by hand: change the recipes and run the command again (`render` refuses a stale lock).",
        f"# inputs-sha256: {inputs_sha256(*_recipe_inputs(recipes, line, python))}",
        f"# exclude-newer: {exclude_newer}",
        f"# resolver: {uv_version()} pip compile --python-platform {PLATFORM} --generate-hashes",
        f"# from-torch-index: {' '.join(from_index)}",
        "",
        "# [venv] the image venv's pip/setuptools/wheel (build-tools.toml [venv]), installed right after `python -m venv`",
        venv_text.strip(),
        "",
        f'# [stack] hf-stack.toml [stack."{line}"] and every dependency, torch {torch.version}\'s own included; '
        "torch itself comes from its stage",
        stack_text.strip(),
    ]
    text = "\n".join(header) + "\n"
    parse(text, lock_key(line, python))  # what uv wrote must read back
    return text


def write_lock(recipes: Recipes, line: str, python: str, text: str) -> Path:
    """Write a lock atomically (a reader never sees half a file)."""
    path = lock_path(recipes, line, python)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)
    return path
