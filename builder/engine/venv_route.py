"""`run workload --venv PATH` (or `--local --python PATH`): a Python environment envbuild did not build, measured as
it is, on this host.

Its own torch is measured; what the workload needs and it lacks comes from the project's lock for its torch line and
Python, brought in read-only exactly as for an image envbuild did not build (builder.engine.foreign: the same probe,
the same lock and the same pip `--target` folder), and nothing is ever installed into it. Its code is untrusted
(docs/measure-any-image.md, "A venv"): the probe and the run get an environment of their own (no variable of this
shell but the locale and the GPU selection: no token, no key, no proxy credential; HOME and TMPDIR a fresh folder),
no bytecode is written (`-B`, PYTHONDONTWRITEBYTECODE), output and time are bounded, and what the host can read of it
without running it (its Python line, torch's version, HIP or CUDA build, from pyvenv.cfg and torch's own files) is
read before and checked against what the run reports (`contradiction`).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder.engine import foreign
from builder.engine.container import RunError
from builder.engine.local_run import Interpreter, run_local
from builder.engine.run_result import RunEnd
from builder.engine.runner import Notify, VenvRun

#: Variables a run in an untrusted venv may see: the locale and the choice of GPUs, nothing else of this shell.
PASSED_THROUGH = (
    "LANG",
    "LC_ALL",
    "TERM",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
)
PROBE_TIMEOUT_S = 120
PROBE_OUTPUT_BYTES = 1 << 20
RUN_TIME_LIMIT_S = 6 * 3600  # the speed preset on a slow GPU is minutes; a hang is stopped
RUN_OUTPUT_CHARS = 64 << 20
_VERSION = re.compile(r"[0-9][A-Za-z0-9.+!_-]{0,63}")


class VenvError(RunError):
    """The path is no Python environment that can be measured (no interpreter, no torch, no lock for it)."""


@dataclass(frozen=True)
class FileFacts:
    """What the host read of the environment's files, without running anything in it (None: not readable)."""

    python: str | None  # "3.11" (pyvenv.cfg, or the lib/pythonX.Y folder)
    torch: str | None  # "2.13.0+cpu" (torch's dist-info METADATA)
    hip: str | None  # torch/version.py's `hip`
    cuda: str | None  # torch/version.py's `cuda`
    build_read: bool = False  # torch/version.py was read (hip and cuda are known, None included)

    def record(self) -> dict:
        return {"python": self.python, "torch": self.torch, "hip": self.hip, "cuda": self.cuda}


class VenvRunner:
    """The route of `--venv PATH` (and `--local --python PATH`): the environment measured as it is; the RunEnd's
    `contradicts` checks the final result against what the host read of its files."""

    def run(self, request: VenvRun, notify: Notify) -> RunEnd:
        python = interpreter_path(request.venv, "--venv")
        work = Path(tempfile.mkdtemp(prefix="envbuild-venv-"))
        try:
            interpreter, facts, line = prepare(python, request, work, request.wheels)
            notify(f"{python} was not made by envbuild: {line}")
            end = run_local(request, notify, interpreter=interpreter)
        finally:
            foreign.remove_work(work)
        if end.invocation:  # the command names the flag, never this machine's path
            command = end.invocation["envbuild"]
            at = command.index("--local")
            end.invocation["envbuild"] = [*command[:at], "--venv", "VENV", *command[at + 1 :]]
        end.contradicts = lambda result: contradiction(result, facts)
        return end


def interpreter_path(path: Path, given_as: str) -> Path:
    """The interpreter of `path`: a venv folder's bin/python, or an interpreter given itself; VenvError otherwise."""
    if "/" not in str(path) and shutil.which(str(path)):  # a name on PATH: --local --python python3.12
        path = Path(shutil.which(str(path)))
    path = Path(path).expanduser().absolute()
    python = path / "bin" / "python" if path.is_dir() else path
    try:
        mode = python.stat().st_mode
    except OSError:
        raise VenvError(
            f"{given_as} {path}: no Python there (give a venv folder, which holds bin/python, or an interpreter)"
        ) from None
    if not stat.S_ISREG(mode) or not os.access(python, os.X_OK):
        raise VenvError(f"{given_as} {path}: {python} is not an executable file")
    return python


def read_files(python: Path) -> FileFacts:
    """The environment's Python line and torch build as its files say (pyvenv.cfg, site-packages), read as text."""
    prefix = python.parent.parent
    version = None
    try:
        cfg = (prefix / "pyvenv.cfg").read_text(errors="replace")[:10000]
        found = re.search(r"^version(?:_info)?\s*=\s*(3\.[0-9]{1,2})", cfg, re.M)
        version = found.group(1) if found else None
    except OSError:
        pass
    sites = sorted(prefix.glob("lib/python3.*/site-packages"))
    if version is None and len(sites) == 1:
        version = sites[0].parent.name.removeprefix("python")
    torch = hip = cuda = None
    build_read = False
    for site in sites:
        metadata = sorted(site.glob("torch-*.dist-info/METADATA"))
        if len(metadata) == 1:
            head = metadata[0].read_text(errors="replace")[:20000]
            found = re.search(r"^Version:\s*(\S+)\s*$", head, re.M)
            torch = found.group(1) if found and _VERSION.fullmatch(found.group(1)) else None
        try:
            text = (site / "torch" / "version.py").read_text(errors="replace")[:20000]
        except OSError:
            continue
        hip, cuda, build_read = _assigned(text, "hip"), _assigned(text, "cuda"), True
    return FileFacts(version, torch, hip, cuda, build_read)


def _assigned(text: str, name: str) -> str | None:
    """`name: Optional[str] = '6.2.41133-dd7f95766'` (or `= None`) in torch/version.py."""
    found = re.search(rf"^{name}\s*(?::[^=]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return found.group(1) if found and _VERSION.fullmatch(found.group(1)) else None


def environment(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a process of the venv: the locale and GPU selection of this shell, a fresh HOME and
    TMPDIR, no bytecode, no user site, offline for the hub."""
    env = {k: os.environ[k] for k in PASSED_THROUGH if k in os.environ}
    env.update(
        PATH="/usr/local/bin:/usr/bin:/bin",
        HOME=str(home),
        TMPDIR=str(home),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        PYTHONUNBUFFERED="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PIP_NO_INDEX="1",
    )
    return {**env, **(extra or {})}


def probe(python: Path, home: Path) -> foreign.Probe:
    """The venv's Python runs foreign's probe (isolated, no bytecode, its output bounded, its time bounded)."""
    where = f"the Python environment of {python}"
    with tempfile.TemporaryFile() as out:
        try:
            subprocess.run(
                [str(python), "-I", "-B", "-c", foreign.PROBE_SCRIPT],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=environment(home),
                cwd=home,
                timeout=PROBE_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise VenvError(f"{where}: its Python did not answer the probe within {PROBE_TIMEOUT_S} s") from None
        except OSError as exc:
            raise VenvError(f"{where}: cannot run it ({exc.strerror or exc})") from None
        out.seek(0)
        text = out.read(PROBE_OUTPUT_BYTES).decode("utf-8", "replace")
    return foreign.parse_probe(text, where)


def prepare(python: Path, request, work: Path, wheels: Path | None) -> tuple[Interpreter, FileFacts, str]:
    """Probe the environment, bring in what it lacks into `work` (a fresh folder of this run's) and return how to
    run the workload in it, what its files say, and one line saying what was brought in."""
    facts = read_files(python)
    home = work / "home"
    home.mkdir(mode=0o700)
    seen = probe(python, home)
    key, missing = foreign.lacking(seen, request.site_recipes)
    cached = foreign.bring_in(seen, key, missing, wheels)
    deps = work / "deps"
    if cached is not None:  # a copy of this run's: the cache itself is never on the venv's path
        shutil.copytree(cached, deps, ignore=shutil.ignore_patterns(".complete"))
    src = foreign.copy_workload(work)
    for path in [deps, *deps.rglob("*")] if deps.exists() else []:
        path.chmod(0o555 if path.is_dir() else 0o444)
    pythonpath = f"{src}:{deps}" if cached is not None else str(src)
    brought = {e.name: e.version for e in missing}
    record = {
        "route": "venv",
        "origin": "not built by envbuild (measured as it is)",
        "probe": {**seen.block(), "torch_path": _inside(seen, python)},
        "files": facts.record(),
        "brought_in": {"lock": key, "packages": brought},
    }
    interpreter = Interpreter(
        argv=(str(python), "-B", "-s"),
        env=environment(home, {"PYTHONPATH": pythonpath}),
        versions={"python": seen.python, "torch": seen.torch.version, "hip": seen.torch.hip, "cuda": seen.torch.cuda},
        record=record,
        cwd=str(home),
        time_limit_s=RUN_TIME_LIMIT_S,
        output_limit_bytes=RUN_OUTPUT_CHARS,
    )
    line = (
        f"torch {seen.torch.version} ({seen.flavor} build), Python {seen.python}; bringing in the workload"
        + (f" and {', '.join(f'{n}=={v}' for n, v in brought.items())} (recipes/locks/{key}.txt)" if brought else "")
        + ", read-only; nothing is installed into it"
    )
    return interpreter, facts, line


def _inside(seen: foreign.Probe, python: Path) -> str:
    """torch's path relative to the environment (a result never names a folder of this machine)."""
    prefix = python.parent.parent
    try:
        return str(Path(seen.torch.file).relative_to(prefix))
    except ValueError:
        return "outside the environment's folder"


def contradiction(result: dict, facts: FileFacts) -> str | None:
    """How the run's reported versions contradict what the host read of the files (None: they agree, or the host
    could not read them)."""
    versions = result.get("versions") if isinstance(result.get("versions"), dict) else {}
    wrong = []
    python = str(versions.get("python") or "")
    if facts.python and python and ".".join(python.split(".")[:2]) != facts.python:
        wrong.append(f"Python {python} (its files: {facts.python})")
    checked = [("torch", facts.torch)] if facts.torch else []
    checked += [("hip", facts.hip), ("cuda", facts.cuda)] if facts.build_read else []
    for key, read in checked:
        if versions.get(key) != read:
            wrong.append(f"{key} {versions.get(key)} (its files: {read})")
    if not wrong:
        return None
    return (
        "the run reported " + ", ".join(wrong) + ": an environment whose run contradicts its own files is not "
        "measured (an attempt, never a verdict)"
    )
