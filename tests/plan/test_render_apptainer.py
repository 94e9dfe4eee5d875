"""The Apptainer definition (cell.def) rendered beside the Dockerfile from the same plan: one content hash for
both routes, the same scripts and pins, a definition that Apptainer's grammar and `sh -n` accept, and the
`envbuild sif --from-context/--pull` doors refusing bad input before anything runs (exit 2).

Building a SIF from the definition needs Apptainer: tests/integration/test_hpc.py does it on the CI cluster."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.engine.apptainer import apptainer_binary
from builder.engine.apptainer_build import build_argv, local_base, read_context
from builder.engine.container import RunError
from builder.plan.render import StaticFiles, context_files, render
from builder.plan.resolve import Request, all_plans, resolve
from tests.render_fixtures import GOLDEN_CELLS, golden_static

SECTION = re.compile(r"^%(\w+)(?: from (\S+))?\s*$")


def stages(definition: str) -> list[dict]:
    """The stages of a definition: header keys and sections (name -> body lines), in order."""
    found: list[dict] = []
    section = None
    for line in definition.splitlines():
        if line.startswith("Bootstrap:"):
            found.append({"header": {}, "sections": {}})
            section = None
        if not found or line.startswith("#") and section is None:
            continue
        match = SECTION.match(line)
        if match:
            section = f"{match[1]} {match[2]}" if match[2] else match[1]
            assert section not in found[-1]["sections"], f"%{section} twice in a stage"
            found[-1]["sections"][section] = []
        elif section is None and line.strip():
            key, sep, value = line.partition(":")
            assert sep, f"header line {line!r} is not KEY: VALUE"
            found[-1]["header"][key] = value.strip()
        elif section is not None:
            found[-1]["sections"][section].append(line)
    return found


def label(text: str, pattern: str) -> list[str]:
    return re.findall(pattern, text, re.M)


@pytest.mark.parametrize("name", sorted(GOLDEN_CELLS))
def test_the_definition_and_the_dockerfile_carry_the_one_content_hash(name, tmp_path):
    rendered = render(resolve(GOLDEN_CELLS[name]), tmp_path / "ctx", golden_static())
    manifest = json.loads((rendered.out_dir / "manifest.json").read_text())
    docker = label(rendered.dockerfile.read_text(), r"io\.envbuild\.context-hash=([0-9a-f]{64})")
    apptainer = label(rendered.definition.read_text(), r"^\s+io\.envbuild\.context-hash ([0-9a-f]{64})$")
    assert docker == apptainer == [manifest["context_hash"]] == [rendered.context_hash]
    assert {"Dockerfile", "cell.def"} <= set(manifest["files"])  # both recipes are in the hash
    assert read_context(rendered.out_dir)[0] == manifest


def test_editing_the_definition_changes_the_content_hash(tmp_path):
    """The hash covers cell.def too: a SIF and an image that share a hash came from the same two recipes."""
    plan = resolve(Request(flavor="cpu", torch="2.13"))
    edited = tmp_path / "images"
    subprocess.run(["cp", "-r", str(Path(__file__).parents[2] / "images"), str(edited)], check=True)
    before, manifest = context_files(plan, golden_static())
    from builder.plan import render as render_module

    render_module._templates.cache_clear()
    original = render_module.IMAGES_DIR
    try:
        render_module.IMAGES_DIR = edited
        (edited / "cell.def.j2").write_text(
            (edited / "cell.def.j2").read_text().replace("%runscript\n", "%runscript\n    true\n")
        )
        after, manifest_after = context_files(plan, golden_static())
    finally:
        render_module.IMAGES_DIR = original
        render_module._templates.cache_clear()
    assert (
        before["Dockerfile"].split(manifest["context_hash"].encode())[0]
        == after["Dockerfile"].split(manifest_after["context_hash"].encode())[0]
    )
    assert manifest_after["context_hash"] != manifest["context_hash"]


def test_the_definition_copies_what_the_dockerfile_copies_and_sets_the_same_pins():
    """Every context file the Dockerfile COPYs, the definition's %files name too (and nothing the context
    lacks); every pin the Dockerfile has as a build argument, the definition exports."""
    static = StaticFiles.read()
    for plan in all_plans():
        files, _ = context_files(plan, static)
        dockerfile, definition = files["Dockerfile"].decode(), files["cell.def"].decode()
        copied = {p for line in re.findall(r"^COPY (?!--from)(.+) /\S+$", dockerfile, re.M) for p in line.split()}
        sources = {
            line.split()[0]
            for stage in stages(definition)
            for key, body in stage["sections"].items()
            if key == "files"
            for line in body
            if line.strip()
        }
        assert {p.rstrip("/") for p in copied} | {"manifest.json"} == sources, plan.cell.key
        for source in sources:
            assert source in files or any(p.startswith(source + "/") for p in files), (plan.cell.key, source)
        args = dict(re.findall(r"^ARG ([A-Z_]+)=(.*)$", dockerfile, re.M))
        exported = dict(re.findall(r"^\s+(?:export )?([A-Z_]+)=(\S*)", definition, re.M))
        for name in set(args) - {"BASE_IMAGE"}:
            assert name in exported, (plan.cell.key, name)


def test_every_rendered_definition_is_well_formed_and_its_scripts_parse(tmp_path):
    """A lint of all cells: each stage has Bootstrap/From/Stage with the base as build arguments, `%files from`
    names an earlier stage, the last stage holds the verify step in %post and %test and the content-hash label,
    and every scriptlet passes `sh -n` (Apptainer runs them with /bin/sh)."""
    static = StaticFiles.read()
    plans = all_plans() + [resolve(Request(flavor="cpu", torch="2.13", base_image="envbuild-local/debian:bookworm"))]
    scripts = []
    for plan in plans:
        definition = context_files(plan, static)[0]["cell.def"].decode()
        found = stages(definition)
        names = [s["header"].get("Stage") for s in found]
        assert names[-1] == "runtime" and len(set(names)) == len(names), (plan.cell.key, names)
        for i, stage in enumerate(found):
            assert stage["header"] == {"Bootstrap": "{{ BOOTSTRAP }}", "From": "{{ BASE_IMAGE }}", "Stage": names[i]}, (
                plan.cell.key
            )
            assert "    BASE_IMAGE=" + plan.base_image in stage["sections"]["arguments"]
            for key in stage["sections"]:
                if key.startswith("files from "):
                    assert key.removeprefix("files from ") in names[:i], (plan.cell.key, key)
            for key in ("setup", "post", "test", "environment", "runscript"):
                if key in stage["sections"]:
                    script = tmp_path / f"{len(scripts):04d}-{key}.sh"
                    script.write_text("\n".join(stage["sections"][key]) + "\n")
                    scripts.append(script)
        last = found[-1]["sections"]
        verify = "python /opt/envbuild/verify_image.py /opt/envbuild/expect.json"
        assert any(verify in line for line in last["post"]) and any(verify in line for line in last["test"])
        assert any(line.split()[0] == "io.envbuild.context-hash" for line in last["labels"] if line.strip())
    for script in scripts:
        checked = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True)
        assert checked.returncode == 0, (script.read_text(), checked.stderr)
    assert len(plans) > 100


def test_a_base_or_bind_path_that_would_change_an_argument_is_refused(tmp_path):
    bad = tmp_path / "a:b.sif"
    bad.write_bytes(b"x")
    with pytest.raises(RunError, match="letters, digits"):
        local_base(bad)
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    assert local_base(sandbox).bootstrap == "localimage"
    tar = tmp_path / "base.tar"
    subprocess.run(["tar", "-cf", str(tar), "-C", str(tmp_path), "sandbox"], check=True)
    assert local_base(tar).bootstrap == "docker-archive" and len(local_base(tar).sha256) == 64
    argv = build_argv("apptainer", tmp_path, tmp_path / "x.sif", local_base(tar), None, True)
    assert argv[:3] == ["apptainer", "build", "--fakeroot"]
    assert ["--build-arg", "BOOTSTRAP=docker-archive", "--build-arg", f"BASE_IMAGE={tar}"] == argv[6:10]
    with pytest.raises(RunError, match="--ca-cert"):
        build_argv("apptainer", tmp_path, tmp_path / "x.sif", None, tmp_path / "ca,x.pem", True)
    lz4 = build_argv("apptainer", tmp_path, tmp_path / "x.sif", None, None, False, "lz4")
    assert lz4[:4] == ["apptainer", "build", "--force", "--mksquashfs-args"] and lz4[4] == "-comp lz4"
    with pytest.raises(RunError, match="--compression"):
        build_argv("apptainer", tmp_path, tmp_path / "x.sif", None, None, True, "lz4 -e /etc")


def _sif(args, env=None):
    return CliRunner().invoke(main, ["sif", *args], env=env)


def test_sif_takes_exactly_one_source(tmp_path):
    out = str(tmp_path / "x.sif")
    assert _sif(["-o", out]).exit_code == 2
    both = _sif(["img:1", "--from-context", str(tmp_path), "-o", out])
    assert both.exit_code == 2 and "exactly one" in both.output
    assert _sif(["img:1", "--base", str(tmp_path), "-o", out]).exit_code == 2
    pulled = _sif(["--pull", "docker://example.org/x:1", "--compression", "lz4", "-o", out])
    assert pulled.exit_code == 2 and "a pull keeps the SIF it gets" in pulled.output
    assert _sif(["img:1", "--compression", "lz5", "-o", out]).exit_code == 2  # not a compressor
    assert not (tmp_path / "x.sif").exists()


def test_from_context_refuses_a_dir_without_a_definition_or_an_edited_one(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    ran = _sif(["--from-context", str(empty), "-o", str(tmp_path / "x.sif")])
    assert ran.exit_code == 2 and "render it first" in ran.output
    ctx = render(resolve(Request(flavor="cpu", torch="2.13")), tmp_path / "ctx").out_dir
    definition = ctx / "cell.def"
    definition.write_text(re.sub(r"context-hash [0-9a-f]{64}", "context-hash " + "0" * 64, definition.read_text()))
    ran = _sif(["--from-context", str(ctx), "-o", str(tmp_path / "x.sif")])
    assert ran.exit_code == 2 and "different content hashes" in ran.output
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith((".envbuild-sif", "x.sif"))] == []


def test_from_context_without_any_apptainer_is_bad_input(tmp_path):
    ctx = render(resolve(Request(flavor="cpu", torch="2.13")), tmp_path / "ctx").out_dir
    ran = _sif(
        ["--from-context", str(ctx), "-o", str(tmp_path / "x.sif")],
        env={"PATH": str(tmp_path / "nothing"), "ENVBUILD_APPTAINER": ""},
    )
    assert ran.exit_code == 2 and "no `apptainer` or `singularity` on PATH" in ran.output


@pytest.mark.parametrize(
    "source, message",
    [
        ("docker://Upper/Case", "not a docker:// reference"),
        ("docker://x\n--bind=/:/", "not a docker:// reference"),
        ("docker-archive:/nonexistent.tar", "not a tar file"),
        ("https://example.org/x.sif", "give docker://REF"),
    ],
)
def test_pull_refuses_what_is_not_a_source(source, message, tmp_path):
    ran = _sif(["--pull", source, "-o", str(tmp_path / "x.sif")], env={"ENVBUILD_APPTAINER": "/bin/true"})
    assert ran.exit_code == 2 and message in ran.output, ran.output


def test_apptainer_is_looked_for_before_singularity(tmp_path, monkeypatch):
    """Either binary is found on PATH (SingularityCE installs `singularity`); $ENVBUILD_APPTAINER wins."""
    for name in ("apptainer", "singularity"):
        (tmp_path / name).mkdir()
        exe = tmp_path / name / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    monkeypatch.delenv("ENVBUILD_APPTAINER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "singularity"))
    assert apptainer_binary() == str(tmp_path / "singularity" / "singularity")
    monkeypatch.setenv("PATH", f"{tmp_path / 'singularity'}:{tmp_path / 'apptainer'}")
    assert apptainer_binary() == str(tmp_path / "apptainer" / "apptainer")
    monkeypatch.setenv("ENVBUILD_APPTAINER", "/opt/site/bin/singularity")
    assert apptainer_binary() == "/opt/site/bin/singularity"


def test_a_builds_own_lines_are_shown_as_they_come_made_plain_and_kept_whole_in_its_log(tmp_path):
    """Apptainer's step lines (INFO/WARNING/FATAL/ERROR) are the progress of `sif --from-context`: shown with their
    escape sequences made harmless and rich markup shown as text; everything it printed stays in the log verbatim.
    (A stand-in apptainer that prints and fails: the build itself runs in tests/integration/test_hpc.py.)"""
    ctx = render(resolve(Request(flavor="cpu", torch="2.13")), tmp_path / "ctx").out_dir
    tool = tmp_path / "apptainer"
    tool.write_text(
        "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'apptainer version 1.3.4'; exit 0; }\n"
        "echo 'INFO:    Starting build...'\necho 'not a step line'\n"
        "printf 'WARNING: \\033[2J[bold]cleared[/]\\n'\necho 'FATAL:   While performing build: boom'\nexit 255\n"
    )
    tool.chmod(0o755)
    ran = _sif(["--from-context", str(ctx), "-o", str(tmp_path / "x.sif")], env={"ENVBUILD_APPTAINER": str(tool)})
    assert ran.exit_code == 1, ran.output
    shown = ran.stderr.splitlines()
    assert shown[0].startswith(f"{tool} build cell.def of cpu-torch2.13-py3.11 (base: the registry default); log: ")
    assert shown[1:4] == [
        "INFO:    Starting build...",
        "WARNING:  [2J[bold]cleared[/]",
        "FATAL:   While performing build: boom",
    ]
    assert "\x1b" not in ran.stderr
    log = (tmp_path / "x.sif.build.log").read_text()
    assert "not a step line\nWARNING: \x1b[2J[bold]cleared[/]\n" in log
