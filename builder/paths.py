"""Where envbuild finds its data (recipes/, images/, workload/) and writes its state."""

from __future__ import annotations

import os
from pathlib import Path

#: The source tree holding recipes/, images/, ci/ and workload/ (an editable install points here).
REPO_ROOT = Path(os.environ.get("ENVBUILD_HOME", Path(__file__).resolve().parents[1]))
RECIPES_DIR = REPO_ROOT / "recipes"
IMAGES_DIR = REPO_ROOT / "images"
WORKLOAD_DIR = REPO_ROOT / "workload"
CI_TEMPLATES_DIR = REPO_ROOT / "ci"
