#!/usr/bin/env python3
"""Write requirements-dev-torch.lock: the development environment's torch, PyTorch's CPU build from PyTorch's CPU
index, pinned by the sha256 of every wheel of it that recipes/wheel-hashes.toml records (one per CPython and
machine: pip takes the wheel for the interpreter it runs and checks it against these).

Run by .ci/lock_dev.sh (or alone: python3 .ci/lock_dev_torch.py [VERSION], default 2.13.0); installed by
.ci/install_dev_torch.sh. Exit 2 when the recipes record no CPU wheel of VERSION.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements-dev-torch.lock"
INDEX = "https://download.pytorch.org/whl/cpu"
_WHEEL = re.compile(
    r"^torch-(?P<version>[0-9.]+)\+cpu-(?P<python>cp3[0-9]+)-(?P=python)-(?P<platform>[a-z0-9_]+)\.whl$"
)


def cpu_wheels(version: str) -> dict[str, str]:
    """{wheel file: sha256} of torch `version`+cpu as recipes/wheel-hashes.toml records them (CPython, not free-threaded)."""
    recorded = tomllib.loads((ROOT / "recipes" / "wheel-hashes.toml").read_text()).get("wheel", {})
    return {
        name: digest
        for name, digest in sorted(recorded.items())
        if (match := _WHEEL.match(name)) and match["version"] == version
    }


def render(version: str, wheels: dict[str, str]) -> str:
    lines = [
        "# The development environment's torch: PyTorch's CPU build from PyTorch's CPU index (the line below), pinned by",
        "# the sha256 of each of its wheels that recipes/wheel-hashes.toml records (sources there). Written by",
        "# .ci/lock_dev.sh (python3 .ci/lock_dev_torch.py); installed by .ci/install_dev_torch.sh with --require-hashes",
        "# --no-deps (its dependencies are in requirements-dev.lock). One hash per wheel below: pip takes the one for",
        "# its CPython and machine and refuses any file whose sha256 is not listed.",
        *(f"#   wheel {name} sha256 {digest}" for name, digest in wheels.items()),
        f"--index-url {INDEX}",
        f"torch=={version}+cpu \\",
        *(
            f"    --hash=sha256:{digest}" + (" \\" if i < len(wheels) - 1 else "")
            for i, digest in enumerate(wheels.values())
        ),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    version = argv[0] if argv else "2.13.0"
    wheels = cpu_wheels(version)
    if not wheels:
        print(
            f"lock_dev_torch: recipes/wheel-hashes.toml records no CPU wheel of torch {version}: record them from "
            f"{INDEX}/torch/ (envbuild recipes check-upstream --index {INDEX} --record)",
            file=sys.stderr,
        )
        return 2
    LOCK.write_text(render(version, wheels))
    print(f"lock_dev_torch: wrote {LOCK.name} (torch {version}+cpu, {len(wheels)} wheels)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
