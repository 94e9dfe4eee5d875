"""Plan -> a deterministic build context: Dockerfile and Apptainer definition (cell.def), scripts, lock, patches,
workload, manifest. Both recipes write the same step model (builder.plan.steps) and both are in the content hash, so the
hash names the cell whichever route builds it (Docker/BuildKit, or `apptainer build` with no Docker engine)."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2

from builder import __version__
from builder.paths import IMAGES_DIR, WORKLOAD_DIR, file_sha256
from builder.plan import steps
from builder.plan.context import expectations, labels, lock_files, template_vars
from builder.plan.lock import TORCH_BUILD_LOCK, Lock, LockError, for_plan, read_build_tools_lock
from builder.plan.resolve import Plan
from builder.plan.wheelhouse import KEEP, WHEELHOUSE, WheelhouseError, hashes, stage, torch_origin, wheels_in

MANIFEST = "manifest.json"
DOCKERFILE, DEFINITION = "Dockerfile", "cell.def"
#: recipe file in the context -> its template in images/
RECIPES = {DOCKERFILE: "Dockerfile.j2", DEFINITION: "cell.def.j2"}
_SKIP = {"__pycache__", ".pytest_cache", ".mypy_cache"}


class RenderError(Exception):
    """The context cannot be written: the output directory holds something that is not a build context, or
    the cell's dependency lock is missing or stale."""


@dataclass(frozen=True)
class Rendered:
    """A written build context."""

    out_dir: Path
    dockerfile: Path
    definition: Path
    manifest: dict
    context_hash: str
    image_tag: str


def read_manifest(context_dir: Path) -> dict | None:
    """The manifest.json of a rendered context (None: the directory has none)."""
    path = Path(context_dir) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


class TemplateValueError(ValueError):
    """A value would end a line of the Dockerfile or the definition file (and so start a section of its own)."""


class _Continued(str):
    """Lines the `continued_lines` filter joined from checked one-line items (the one multi-line value)."""


def _continued_lines(items, indent: int) -> _Continued:
    """One Dockerfile instruction's items, one per line with ` \\` continuations; each item is one line."""
    return _Continued((" \\\n" + " " * indent).join(_one_line(item) for item in items))


def _one_line(value):
    """Every `{{ value }}` of both templates: refused when it holds a line end or another control character,
    which would let data start a Dockerfile instruction or an Apptainer section such as %setup."""
    if isinstance(value, str) and not isinstance(value, _Continued) and _LINE_BREAKING.search(value):
        raise TemplateValueError(f"{value[:80]!r} holds a line end or control character; a recipe value is one line")
    return value


_LINE_BREAKING = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")
_PLAIN = re.compile(r"[A-Za-z0-9_.:/@+=,-]*")


def _docker_quote(value: str) -> str:
    """A Dockerfile ARG/LABEL/ENV value: bare when safe, else a double-quoted JSON string."""
    return value if value and _PLAIN.fullmatch(value) else json.dumps(value)


def _docker_assign(pair: tuple[str, str]) -> str:
    """NAME=value of a LABEL or ENV line."""
    return f"{pair[0]}={_docker_quote(pair[1])}"


def _docker_copies(copies) -> list[str]:
    """A step's copies as COPY operands, one line per run of copies into the same destination."""
    lines: list[tuple[list[str], str]] = []
    for copy in copies:
        if lines and lines[-1][1] == copy.dest:
            lines[-1][0].append(copy.src)
        else:
            lines.append(([copy.src], copy.dest))
    return [" ".join([*sources, dest]) for sources, dest in lines]


def _docker_mounts(step: steps.Step) -> list[str]:
    """A step's RUN --mount options: the proxy CA for a step that fetches, the wheelhouse, earlier stages, a cache."""
    mounts = ["--mount=type=secret,id=envbuild_ca,required=false"] if step.fetches else []
    mounts += ["--mount=type=bind,source=wheelhouse,target=/wheelhouse"] if step.wheelhouse else []
    mounts += [f"--mount=type=bind,from={b.stage},source={b.source},target={b.target}" for b in step.binds]
    if step.cache:
        mounts.append(f"--mount=type=cache,target={step.cache[1]},id={step.cache[0]}")
    return mounts


@lru_cache(maxsize=1)
def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(IMAGES_DIR),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        finalize=_one_line,
    )
    env.filters["continued_lines"] = _continued_lines
    env.filters["sh"] = shlex.quote  # a value as one shell word (RUN and %post lines)
    env.filters["dq"] = _docker_quote
    env.filters["docker_assign"] = _docker_assign
    env.filters["docker_copies"] = _docker_copies
    env.filters["docker_mounts"] = _docker_mounts
    return env


def _tree(root: Path, prefix: str) -> dict[str, bytes]:
    """Files under `root` keyed `prefix/relative/path` (caches and bytecode left out)."""
    return {
        f"{prefix}/{p.relative_to(root).as_posix()}": p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not _SKIP.intersection(p.parts) and p.suffix != ".pyc"
    }


@dataclass(frozen=True)
class StaticFiles:
    """The files every context shares (images/common/ scripts, workload/), read once with their hashes."""

    files: dict[str, bytes]
    hashes: dict[str, str]

    @classmethod
    def read(cls, workload_dir: Path = WORKLOAD_DIR) -> "StaticFiles":
        files = {**_tree(IMAGES_DIR / "common", "common"), **_tree(workload_dir, "workload")}
        return cls(files, {path: _bytes_sha256(data) for path, data in files.items()})


def _bytes_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_hashes(files: dict[str, bytes], known: dict[str, str] | None = None) -> dict[str, str]:
    """{path: sha256} of the files that make up the content hash (all but manifest.json); `known` may
    hold hashes of files not in `files` (the wheelhouse, hashed where it lies)."""
    known = known or {}
    hashed = {path: known.get(path) or _bytes_sha256(data) for path, data in files.items() if path != MANIFEST}
    hashed |= {path: digest for path, digest in known.items() if path.startswith(WHEELHOUSE + "/")}
    return dict(sorted(hashed.items()))


def hash_files(hashes: dict[str, str]) -> str:
    """Content hash of a context: sha256 over the sorted `<sha256>  <path>` lines of `file_hashes`."""
    return _bytes_sha256("".join(f"{digest}  {path}\n" for path, digest in sorted(hashes.items())).encode())


def _recipes(plan: Plan, context_hash: str, lock: Lock) -> dict[str, bytes]:
    """The Dockerfile and cell.def of the plan, from one set of template variables."""
    variables = template_vars(plan, context_hash, lock)
    return {name: _templates().get_template(template).render(variables).encode() for name, template in RECIPES.items()}


def context_files(
    plan: Plan, static: StaticFiles | None = None, wheelhouse: dict[str, str] | None = None
) -> tuple[dict[str, bytes], dict]:
    """The whole build context in memory: {relative path: bytes} (manifest.json included) and the manifest.

    The context hash covers every file except manifest.json, with the `io.envbuild.context-hash` label of the
    Dockerfile and of cell.def empty; the written recipes then carry the hash in that label. `wheelhouse` holds the sha256
    of the wheels under wheelhouse/ ({"wheelhouse/<name>": sha256}; their bytes are not in the result).
    Pass one `static` snapshot to render many plans without re-reading the shared files. Raises
    RenderError when the plan's dependency lock (recipes/locks/) is missing or stale.
    """
    try:
        lock = for_plan(plan)
        build_lock = (
            read_build_tools_lock(plan.lock_path.parent.parent / TORCH_BUILD_LOCK, plan.build_tools.torch_build)
            if plan.torch_source == "source"
            else None
        )
    except LockError as exc:
        raise RenderError(str(exc)) from exc
    static = static or StaticFiles.read()
    wheelhouse = wheelhouse or {}
    known = {**static.hashes, **wheelhouse}
    recipes = _recipes(plan, "", lock)
    used = {f"common/{name}" for name in steps.scripts(plan)}
    files = {
        **{name: text.encode() for name, text in lock_files(plan, lock).items()},
        "expect.json": (json.dumps(expectations(plan, lock), indent=2, sort_keys=True) + "\n").encode(),
        **({TORCH_BUILD_LOCK: build_lock.encode()} if build_lock is not None else {}),
        KEEP: b"",
        # only the scripts the plan's steps copy: editing another step's script changes no other context
        **{p: d for p, d in static.files.items() if not p.startswith("common/") or p in used},
    }
    if plan.patch_dir is not None:
        files["patches/series"] = (plan.patch_dir / "series").read_bytes()
        files |= {f"patches/{p.ref}": (plan.patch_dir / p.ref).read_bytes() for p in plan.patches if p.kind == "patch"}
    files |= recipes
    context_hash = hash_files(file_hashes(files, known))
    files |= _recipes(plan, context_hash, lock)
    image_tag = f"envbuild/{plan.cell.key}:{context_hash[:12]}"
    manifest = {
        "schema_version": 1,
        "envbuild_version": __version__,
        "cell_key": plan.cell.key,
        **plan.pinned(),
        "recipe_hash": plan.recipe_hash,
        "labels": labels(plan, context_hash, lock),
        "lock": {
            "file": f"recipes/locks/{lock.key}.txt",
            "sha256": lock.sha256,
            "exclude_newer": lock.header.get("exclude-newer"),
            "packages": lock.versions("stack"),
            "venv": lock.versions("venv"),
            # what PyPI's torch (a CUDA build) requires on Linux and the lock therefore leaves out (nvidia-*,
            # triton): never installed in a ROCm or CPU image, whose torch index supplies its own (e.g.
            # pytorch-triton-rocm; the image lists it in /opt/envbuild/from-torch-index.txt)
            "left_out_cuda_requirements": list(lock.from_torch_index),
        },
        "files": file_hashes(files, known),
        "torch_origin": torch_origin(plan, wheelhouse),
        "fetch_steps": steps.fetch_steps(plan),
        # the memory one compile job of a source build may need (recipes/flavors.toml compile_job_mem_mb): the build
        # workflow sizes MAX_JOBS from it on the building machine (not hashed: the hash is the same on every host)
        **({"compile_job_mem_mb": plan.flavor.compile_job_mem_mb} if plan.torch_source == "source" else {}),
        "context_hash": context_hash,
        "image_tag": image_tag,
    }
    files[MANIFEST] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    return files, manifest


def render(
    plan: Plan, out_dir: Path | str, static: StaticFiles | None = None, wheelhouse: Path | None = None
) -> Rendered:
    """Write the build context of `plan` to `out_dir` (replacing an earlier envbuild context there).

    `wheelhouse`: a dir whose wheels become the context's wheelhouse/ (hard-linked or copied); without it,
    files already in `out_dir/wheelhouse/` are kept. Either way they are hashed into the content hash.
    Raises RenderError when `out_dir` holds anything that is not an envbuild context, or `wheelhouse`
    holds no wheels.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / MANIFEST).is_file():
        raise RenderError(f"{out_dir} is not empty and is not an envbuild build context; choose another -o DIR")
    try:
        wheels = wheels_in(wheelhouse) if wheelhouse is not None else []
    except WheelhouseError as exc:
        raise RenderError(str(exc)) from exc
    wheel_hashes = (
        {f"{WHEELHOUSE}/{w.name}": file_sha256(w) for w in wheels}
        if wheelhouse is not None
        else hashes(out_dir / WHEELHOUSE)
    )
    files, manifest = context_files(plan, static, wheel_hashes)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    staging.chmod(0o755)
    try:
        for rel, data in files.items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        if wheelhouse is not None:
            stage(wheels, staging / WHEELHOUSE)
        elif (out_dir / WHEELHOUSE).is_dir():
            shutil.rmtree(staging / WHEELHOUSE)
            (out_dir / WHEELHOUSE).rename(staging / WHEELHOUSE)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Rendered(
        out_dir=out_dir,
        dockerfile=out_dir / DOCKERFILE,
        definition=out_dir / DEFINITION,
        manifest=manifest,
        context_hash=manifest["context_hash"],
        image_tag=manifest["image_tag"],
    )
