"""The checkout these tests run from (its results/, docs/, bench/ and .ci/ are not package data)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
