"""Images envbuild did not render, built here for the foreign-image tests: a plain Debian (the local base image)
with pip's CPU torch 2.13.0 and nothing else; the same plus the project's locked stack except peft; and the plain
one whose torch says it was built for CUDA 13.0 (its version.py edited: a CPU torch that reports a CUDA build, as
a CUDA wheel on a machine without a GPU does). Each image's torch carries a marker in its version
(`+cpu.imagetorch`), so a result that records it proves the image's own torch ran."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from builder.paths import RECIPES_DIR
from builder.plan import lock as lockfile
from builder.plan import recipes

DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
CA = Path("/etc/ssl/certs/ca-certificates.crt")
TORCH_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
MARKED_VERSION = "2.13.0+cpu.imagetorch"
_PIP = (
    "if [ -f /run/secrets/envbuild_ca ]; then export PIP_CERT=/run/secrets/envbuild_ca; fi; "
    "pip install -q --break-system-packages --no-cache-dir --root-user-action=ignore"
)

PLAIN = """\
FROM {base}
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-pip ca-certificates \\
    >/dev/null && rm -rf /var/lib/apt/lists/*
COPY {wheel} /tmp/
RUN --mount=type=secret,id=envbuild_ca,required=false sh -c '{pip} /tmp/{wheel}' && rm /tmp/{wheel} && \\
    sed -i "s/^__version__ = .*/__version__ = '{marked}'/" /usr/local/lib/python3.11/dist-packages/torch/version.py
"""
NO_PEFT = """\
FROM {plain}
COPY stack.txt /tmp/
RUN --mount=type=secret,id=envbuild_ca,required=false sh -c '{pip} --no-deps --require-hashes -r /tmp/stack.txt'
"""
CUDA_SAYS = """\
FROM {plain}
RUN sed -i -e "s/^__version__ = .*/__version__ = '2.13.0+cu130'/" -e "s/^cuda: .*/cuda: Optional[str] = '13.0'/" \\
    /usr/local/lib/python3.11/dist-packages/torch/version.py
"""


def _build(ctx: Path, tag: str) -> str:
    secret = ["--secret", f"id=envbuild_ca,src={CA}"] if CA.is_file() else []
    proc = subprocess.run(
        [DOCKER, "build", "--network", "host", *secret, "-t", tag, str(ctx)],
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        timeout=1500,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"docker build {tag} failed: {proc.stderr[-3000:]}")
    return tag


def stack_without(names: set[str]) -> str:
    """The torch 2.13 / Python 3.11 lock's stack (torch's own dependencies left to the image), minus `names`."""
    lock = lockfile.read(recipes.load(RECIPES_DIR), "2.13", "3.11")
    torch_deps = {
        "filelock",
        "typing-extensions",
        "setuptools",
        "sympy",
        "mpmath",
        "networkx",
        "jinja2",
        "markupsafe",
        "fsspec",
    }
    wanted = {e.name for e in lock.entries("stack")} - names - torch_deps
    return lock.requirements("stack", wanted)


def plain_torch_image(base: str, work: Path, tag: str = "envbuild-test/foreign-torch:2.13") -> str:
    ctx = work / "plain"
    ctx.mkdir(parents=True, exist_ok=True)
    shutil.copy(TORCH_WHEEL, ctx / TORCH_WHEEL.name)
    (ctx / "Dockerfile").write_text(PLAIN.format(base=base, wheel=TORCH_WHEEL.name, pip=_PIP, marked=MARKED_VERSION))
    return _build(ctx, tag)


def no_peft_image(plain: str, work: Path, tag: str = "envbuild-test/foreign-nopeft:2.13") -> str:
    ctx = work / "nopeft"
    ctx.mkdir(parents=True, exist_ok=True)
    (ctx / "stack.txt").write_text(stack_without({"peft"}))
    (ctx / "Dockerfile").write_text(NO_PEFT.format(plain=plain, pip=_PIP))
    return _build(ctx, tag)


def cuda_says_image(plain: str, work: Path, tag: str = "envbuild-test/foreign-cuda-says:2.13") -> str:
    ctx = work / "cuda-says"
    ctx.mkdir(parents=True, exist_ok=True)
    (ctx / "Dockerfile").write_text(CUDA_SAYS.format(plain=plain))
    return _build(ctx, tag)


def sif_from_image(client, tag: str, sif: Path, apptainer: str | Path, timeout: float) -> Path:
    """Image `tag` as the SIF `sif`, built by `apptainer` from a `docker save` archive beside it (removed after), the
    way a site turns an image it was given into a SIF; the archive is readable by the cluster's job user. lz4, not
    Apptainer's default gzip: squashing a torch image's 1.4 GB with gzip takes minutes on 2 cores, and no test
    reads the compressor."""
    archive = sif.with_suffix(".tar")
    with open(archive, "wb") as handle:
        for chunk in client.images.get(tag).save(named=True):
            handle.write(chunk)
    archive.chmod(0o644)
    built = subprocess.run(
        [str(apptainer), "build", "--force", "--mksquashfs-args", "-comp lz4", str(sif), f"docker-archive://{archive}"],
        cwd=sif.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    archive.unlink()
    return sif
