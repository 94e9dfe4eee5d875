"""A site's recipe folder over the packaged recipes (`envbuild --recipes DIR`, ENVBUILD_RECIPES): it adds a
release and overrides an entry without a fork, `recipes list` says which cells came from it, and a bad folder
is refused (exit 2) before anything is rendered."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from render_fixtures import SITE_CELL_RENDER
from repo import REPO_ROOT

PACKAGED = (REPO_ROOT / "recipes" / "rocm.toml").read_text()


def _release_block(version: str) -> str:
    """The packaged [release."X"] table's text, as a site would copy it."""
    start = PACKAGED.index(f'[release."{version}"]')
    end = PACKAGED.find("\n[", start + 1)
    return PACKAGED[start : end if end != -1 else None].strip() + "\n"


def _envbuild(*args, cwd, env=None):
    environment = {k: v for k, v in os.environ.items() if k != "ENVBUILD_RECIPES"}
    return subprocess.run(
        [sys.executable, "-m", "builder", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**environment, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
    )


def _site(tmp_path, text: str):
    site = tmp_path / "site"
    site.mkdir()
    (site / "rocm.toml").write_text(text)
    return site


def test_a_site_adds_a_release_and_recipes_list_says_where_each_cell_came_from(tmp_path):
    block = _release_block("6.2").replace('[release."6.2"]', '[release."6.2.9"]')
    block = re.sub(r'base_image = "[^"]+"', 'base_image = "registry.example.org/site/rocm:6.2.9"', block)
    site = _site(tmp_path, block)
    listed = _envbuild("--recipes", str(site), "recipes", "list", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    new = [r for r in rows if r["cell"].startswith("rocm6.2.9-")]
    assert new and all(r["origin"] == f"site ({site.resolve()})" for r in new)
    assert {r["origin"] for r in rows if not r["cell"].startswith("rocm6.2.9-")} == {"packaged"}
    # the same through the environment variable, and the packaged list without either
    by_env = json.loads(
        _envbuild("recipes", "list", "--json", cwd=tmp_path, env={"ENVBUILD_RECIPES": str(site)}).stdout
    )
    assert by_env == rows
    plain = json.loads(_envbuild("recipes", "list", "--json", cwd=tmp_path).stdout)
    assert len(plain) == len(rows) - len(new) and not any(r["cell"].startswith("rocm6.2.9-") for r in plain)

    rendered = _envbuild("--recipes", str(site), *SITE_CELL_RENDER, "-o", str(tmp_path / "ctx"), cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    assert "ARG BASE_IMAGE=registry.example.org/site/rocm:6.2.9\n" in (tmp_path / "ctx" / "Dockerfile").read_text()


def test_a_site_overrides_a_packaged_entry(tmp_path):
    block = re.sub(
        r'base_image = "[^"]+"', 'base_image = "mirror.example.org/rocm/dev-ubuntu-22.04:6.2"', _release_block("6.2")
    )
    site = _site(tmp_path, block)
    args = ["render", "--rocm", "6.2", "--torch", "2.5", "--arch", "gfx90a"]
    ours = _envbuild("--recipes", str(site), *args, "-o", str(tmp_path / "site-ctx"), cwd=tmp_path)
    packaged = _envbuild(*args, "-o", str(tmp_path / "ctx"), cwd=tmp_path)
    assert ours.returncode == packaged.returncode == 0, ours.stderr + packaged.stderr
    assert "mirror.example.org/rocm/dev-ubuntu-22.04:6.2" in (tmp_path / "site-ctx" / "Dockerfile").read_text()
    assert "mirror.example.org" not in (tmp_path / "ctx" / "Dockerfile").read_text()
    manifests = [json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("site-ctx", "ctx")]
    assert manifests[0]["context_hash"] != manifests[1]["context_hash"]  # other data, another image


def test_a_bad_site_folder_is_refused_before_anything_is_rendered(tmp_path):
    site = _site(tmp_path, '[release."6.2.9"\nbase_image = "x"\n')  # a TOML syntax error
    proc = _envbuild(
        "--recipes",
        str(site),
        "render",
        "--rocm",
        "6.2",
        "--torch",
        "2.5",
        "--arch",
        "gfx90a",
        "-o",
        str(tmp_path / "ctx"),
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "rocm.toml" in proc.stderr and "Traceback" not in proc.stderr and not (tmp_path / "ctx").exists()
    (site / "rocm.toml").unlink()
    (site / "rocm.toml").symlink_to("/etc/hostname")
    linked = _envbuild("--recipes", str(site), "recipes", "list", cwd=tmp_path)
    assert linked.returncode == 2 and "symbolic link" in linked.stderr, linked.stderr
    missing = _envbuild("--recipes", str(tmp_path / "nope"), "recipes", "list", cwd=tmp_path)
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_a_peer_source_build_proves_only_its_own_release(tmp_path):
    """A site lists a peer build of torch 2.3 on ROCm 6.2: that cell renders as peer-built; the same torch on
    ROCm 6.1.2 stays unproven (--proven-only refuses it, exit 2), since the proof is for the exact release."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "source-builds.toml").write_text(
        '[[build]]\nflavor = "rocm"\nrelease = "6.2"\ntorch = "2.3"\nrepo = "https://github.com/pytorch/pytorch.git"\n'
        f'ref = "v2.3.1"\ncommit = "{"a" * 40}"\nversion = "2.3.1"\npeer = "https://example.org/a-peer-build"\n'
        'checked = "a test of the overlay"\n'
    )
    args = ["--torch", "2.3", "--arch", "gfx90a", "--torch-source", "source"]
    proven = _envbuild(
        "--recipes", str(site), "render", "--rocm", "6.2", *args, "-o", str(tmp_path / "ok"), cwd=tmp_path
    )
    assert proven.returncode == 0, proven.stderr
    manifest = json.loads((tmp_path / "ok" / "manifest.json").read_text())
    assert '"peer-built"' in json.dumps(manifest) and "https://example.org/a-peer-build" in json.dumps(manifest)
    assert (
        _envbuild(
            "--recipes",
            str(site),
            "render",
            "--rocm",
            "6.2",
            *args,
            "--proven-only",
            "-o",
            str(tmp_path / "ok2"),
            cwd=tmp_path,
        ).returncode
        == 0
    )
    other = _envbuild(
        "--recipes",
        str(site),
        "render",
        "--rocm",
        "6.1.2",
        *args,
        "--proven-only",
        "-o",
        str(tmp_path / "no"),
        cwd=tmp_path,
    )
    assert other.returncode == 2, other.stdout + other.stderr
    assert "not yet proven" in " ".join(other.stderr.split()), other.stderr
    assert not (tmp_path / "no").exists()


def _new_release_site(tmp_path):
    """A site folder that adds ROCm 6.2.9 (a copy of 6.2 with the site's own base image)."""
    block = _release_block("6.2").replace('[release."6.2"]', '[release."6.2.9"]')
    return _site(
        tmp_path, re.sub(r'base_image = "[^"]+"', 'base_image = "registry.example.org/site/rocm:6.2.9"', block)
    )


def test_the_plan_takes_the_site_folder_as_an_argument_and_never_reads_the_environment(tmp_path, monkeypatch):
    """Given the folder, the loader, the resolver and the cell list use it with ENVBUILD_RECIPES unset; with the
    variable set later (as a caller might after the CLI parsed its flags) and no folder given, they read the
    packaged recipes alone."""
    from builder.plan.recipe_cells import recipe_cells
    from builder.plan.recipes import load
    from builder.plan.resolve import Request, ResolveError, resolve

    site = _new_release_site(tmp_path)
    monkeypatch.delenv("ENVBUILD_RECIPES", raising=False)
    given = load(site=site)
    assert "6.2.9" in given.releases["rocm"]
    plan = resolve(Request(accel_version="6.2.9", torch="2.5", arch="gfx90a"), given)
    assert plan.base_image.startswith("registry.example.org/site/rocm:6.2.9")
    assert any(c.key.startswith("rocm6.2.9-") for c in recipe_cells(every=True, site=site))

    monkeypatch.setenv("ENVBUILD_RECIPES", str(site))
    assert "6.2.9" not in load().releases["rocm"]
    assert not any(c.key.startswith("rocm6.2.9-") for c in recipe_cells(every=True))
    with pytest.raises(ResolveError, match="6.2.9"):
        resolve(Request(accel_version="6.2.9", torch="2.5", arch="gfx90a"))


def test_the_cli_reads_the_folder_at_the_door_and_leaves_the_environment_alone(tmp_path, monkeypatch):
    """`--recipes DIR` reaches the verb as a value: the process environment is not written, so a later plan call
    in the same process sees the packaged recipes."""
    from click.testing import CliRunner

    from builder.cli import main
    from builder.plan.recipes import load

    site = _new_release_site(tmp_path)
    monkeypatch.delenv("ENVBUILD_RECIPES", raising=False)
    result = CliRunner().invoke(main, ["--recipes", str(site), "recipes", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {r["origin"] for r in rows if r["cell"].startswith("rocm6.2.9-")} == {f"site ({site.resolve()})"}
    assert "ENVBUILD_RECIPES" not in os.environ
    assert "6.2.9" not in load().releases["rocm"]
