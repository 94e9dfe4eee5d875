"""Fixtures of the CLI tests: read_only_dir (tests/paths_fixtures.py), a folder no one may write."""

from paths_fixtures import read_only_dir  # noqa: F401 - a fixture for this folder's tests
