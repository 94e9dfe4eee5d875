"""The checkout these tests run from (its results/, docs/, bench/ and .ci/ are not package data), and the base
image the Docker tests build on."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The registry-free base image .ci/local_base_image.sh makes (the Docker tests build on it).
LOCAL_BASE = "envbuild-local/debian:bookworm"
