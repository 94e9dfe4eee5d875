"""Rendering: golden files, determinism, content hash, manifest, wheelhouse and output-dir handling.

Regenerate the golden files after an intended change: ENVBUILD_UPDATE_GOLDEN=1 pytest tests/plan/test_render.py
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

from builder.paths import IMAGES_DIR
from builder.plan.recipes import Recipes
from builder.plan.render import RenderError, StaticFiles, context_files, render
from builder.plan.resolve import Request, resolve
from tests.render_fixtures import GOLDEN_CELLS, GOLDEN_DIR, GOLDEN_FILES, golden_static, tree_digest

UPDATE = os.environ.get("ENVBUILD_UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("name", sorted(GOLDEN_CELLS))
def test_golden(name, tmp_path):
    rendered = render(resolve(GOLDEN_CELLS[name]), tmp_path / "ctx", golden_static())
    for file in GOLDEN_FILES:
        golden = GOLDEN_DIR / name / file
        actual = (rendered.out_dir / file).read_text()
        if UPDATE:
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(actual)
        assert actual == golden.read_text(), (
            f"{file} of {name} differs from {golden} (ENVBUILD_UPDATE_GOLDEN=1 to accept)"
        )


def test_each_golden_cell_takes_the_torch_route_its_name_says():
    routes = {name: resolve(req).torch_source for name, req in GOLDEN_CELLS.items()}
    assert routes == {
        "rocm6.1.2-torch2.3-source": "source",
        "rocm6.2-torch2.4-source": "source",
        "rocm6.2-torch2.5-wheel": "wheel",
        "rocm6.4-torch2.8-wheel": "wheel",
        "rocm7.2-torch2.11-gfx942-wheel": "wheel",
        "cpu-torch2.13": "wheel",
        "rocm7.14-torch2.14-gfx942-pip": "wheel",
        "rocm10.0-torch2.13-gfx1151-pip": "wheel",
        "rocm10.1-torch2.14-gfx90a-pip": "wheel",
        "rocm7.14.1-torch2.11-gfx90a-pip": "wheel",
    }
    bases = {name: resolve(req).base_image for name, req in GOLDEN_CELLS.items() if name.startswith("rocm")}
    assert bases["rocm6.4-torch2.8-wheel"].startswith("rocm/dev-ubuntu-22.04:")
    assert bases["rocm7.2-torch2.11-gfx942-wheel"].startswith("rocm/dev-ubuntu-24.04:")
    assert bases["rocm7.14-torch2.14-gfx942-pip"] == bases["rocm10.0-torch2.13-gfx1151-pip"] == "ubuntu:24.04"


def test_the_pip_rocm_route_installs_one_archs_device_package_in_both_formats():
    """`render --rocm 7.14 --torch 2.14 --arch gfx942`: torch 2.14.0+rocm7.14 from PyTorch's rocm7.14 index, and
    before it `rocm[libraries,device-gfx942]==7.14.0` from that index only, in the Dockerfile and in cell.def; no
    other arch's device package and no device-all anywhere; expect.json has the verify step check exactly that."""
    import json

    files, manifest = context_files(resolve(GOLDEN_CELLS["rocm7.14-torch2.14-gfx942-pip"]), golden_static())
    dockerfile, definition = files["Dockerfile"].decode(), files["cell.def"].decode()
    assert 'ARG ACCEL_REQUIREMENTS="rocm[libraries,device-gfx942]==7.14.0"' in dockerfile
    assert "ARG TORCH_VERSION=2.14.0+rocm7.14" in dockerfile and "FROM ${BASE_IMAGE} AS base" in dockerfile
    accel = definition.index("    bash /opt/envbuild/common/install_accel_wheels.sh")
    assert "    export ACCEL_REQUIREMENTS='rocm[libraries,device-gfx942]==7.14.0'\n" in definition[:accel]
    assert "    export TORCH_INDEX_URL=https://download.pytorch.org/whl/rocm7.14\n" in definition[:accel]
    for text in (dockerfile, definition):  # the SDK wheels come before torch, in the torch stage
        assert text.index("install_accel_wheels.sh") < text.rindex("install_torch.sh")
        assert "device-all" not in text and not re.search(r"device-gfx(?!942)", text)
    expect = json.loads(files["expect.json"])
    assert expect["accel_wheels"]["device_packages"] == ["rocm-sdk-device-gfx942"]
    assert expect["backend_version"] is None  # the wheels' HIP version is not the release's (not verified)
    assert manifest["accel_wheels"]["requirements"] == ["rocm[libraries,device-gfx942]==7.14.0"]
    assert manifest["torch"]["wheel_index_url"] == "https://download.pytorch.org/whl/rocm7.14"
    assert "install_accel_wheels.sh" in manifest["fetch_steps"]
    amd = resolve(GOLDEN_CELLS["rocm10.0-torch2.13-gfx1151-pip"]).accel_wheels
    assert amd["requirements"] == [
        "rocm[libraries,device-gfx1151]==10.0.0",
        "amd-torch-device-gfx1151==2.13.0+rocm10.0.0",
    ]


def test_the_manifest_names_the_triton_an_official_wheel_pulls():
    """torch <= 2.9 wheels pull pytorch-triton-rocm, 2.10+ triton-rocm (recipes/torch.toml); recorded where a peer's
    resolution shows the pin, absent where none was verified (2.7, 2.11)."""
    pulls = {
        line: resolve(Request(accel_version=rocm, torch=line)).pinned()["torch"]["wheel_pulls"]
        for rocm, line in (("6.4", "2.8"), ("7.1", "2.10"), ("6.3", "2.7"), ("7.2", "2.11"))
    }
    assert pulls["2.8"]["package"] == "pytorch-triton-rocm" and pulls["2.8"]["version"] == "3.4.0"
    assert pulls["2.10"]["package"] == "triton-rocm" and pulls["2.10"]["version"] == "3.6.0"
    assert "InvokeAI#9297" in pulls["2.10"]["checked"]
    assert pulls["2.7"] is None and pulls["2.11"] is None
    # the 2.10 pin was read for the rocm7.1 wheel: the rocm7.0 wheel's is not claimed
    assert resolve(Request(accel_version="7.0", torch="2.10")).pinned()["torch"]["wheel_pulls"] is None
    assert resolve(Request(accel_version="6.2", torch="2.4")).pinned()["torch"]["wheel_pulls"] is None


def test_same_request_gives_byte_identical_context(tmp_path):
    request = Request(accel_version="6.2", torch="2.4")
    first = render(resolve(request), tmp_path / "a")
    second = render(resolve(request), tmp_path / "b")
    assert tree_digest(first.out_dir) == tree_digest(second.out_dir)
    assert first.context_hash == second.context_hash and first.image_tag == second.image_tag
    again = render(resolve(request), tmp_path / "a")  # re-render over an earlier context
    assert tree_digest(again.out_dir) == tree_digest(second.out_dir)


@pytest.mark.parametrize(
    "changed",
    [
        Request(accel_version="6.2", torch="2.4", python="3.11"),
        Request(accel_version="6.2", torch="2.4", arch="gfx942"),
        Request(accel_version="6.2", torch="2.4", base_image="example.org/rocm:6.2"),
        Request(accel_version="6.2", torch="2.4", install_accel=True),
    ],
    ids=["python", "arch", "base-image", "install-rocm"],
)
def test_any_changed_input_changes_the_hash(changed):
    base, _ = context_files(resolve(Request(accel_version="6.2", torch="2.4")))
    other, _ = context_files(resolve(changed))
    base_manifest, other_manifest = json.loads(base["manifest.json"]), json.loads(other["manifest.json"])
    assert base_manifest["context_hash"] != other_manifest["context_hash"]
    assert base_manifest["recipe_hash"] != other_manifest["recipe_hash"]


def test_workload_edit_changes_hash_but_not_the_torch_layers(tmp_path):
    plan = resolve(Request(accel_version="6.2", torch="2.4"))
    edited = tmp_path / "workload"
    edited.mkdir()
    (edited / "__main__.py").write_text("print('edited')\n")
    before, manifest_before = context_files(plan, golden_static())
    after, manifest_after = context_files(plan, StaticFiles.read(edited))
    assert manifest_before["context_hash"] != manifest_after["context_hash"]
    assert manifest_before["recipe_hash"] == manifest_after["recipe_hash"]
    hash_label = re.compile(rb"io\.envbuild\.context-hash=\w+")
    assert hash_label.sub(b"", before["Dockerfile"]) == hash_label.sub(b"", after["Dockerfile"])
    # the workload is copied after every install step: editing it rebuilds no torch/stack layer, only the
    # final verify step (which reads installed metadata, no network) runs again
    lines = before["Dockerfile"].decode().splitlines()
    copy_workload = next(i for i, line in enumerate(lines) if line.startswith("COPY workload/"))
    after_workload = [line for line in lines[copy_workload:] if line.startswith(("RUN", "FROM"))]
    assert after_workload == [
        "RUN python /opt/envbuild/verify_image.py /opt/envbuild/expect.json /opt/envbuild/verify.json"
    ]


TORCH_CPU_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def test_wheelhouse_is_hashed_into_the_tag_and_names_torch_origin(tmp_path):
    """Same tag => same wheels: a wheel in wheelhouse/ changes the content hash, and the manifest says torch
    comes from that file (with its sha256) instead of the index."""
    plan = resolve(Request(flavor="cpu", torch="2.13"))
    bare = render(plan, tmp_path / "ctx")
    assert bare.manifest["torch_origin"] == {
        "from": "index",
        "index_url": "https://download.pytorch.org/whl/cpu",
        "requirement": "torch==2.13.0+cpu",
    }
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / TORCH_CPU_WHEEL).write_bytes(b"one")
    (wheels / "notes.txt").write_text("not a wheel")
    one = render(plan, tmp_path / "ctx", wheelhouse=wheels)
    digest = hashlib.sha256(b"one").hexdigest()
    assert one.context_hash != bare.context_hash
    assert one.manifest["files"][f"wheelhouse/{TORCH_CPU_WHEEL}"] == digest
    assert one.manifest["torch_origin"] == {
        "from": "wheelhouse",
        "file": f"wheelhouse/{TORCH_CPU_WHEEL}",
        "sha256": digest,
    }
    assert sorted(p.name for p in (one.out_dir / "wheelhouse").iterdir()) == [".keep", TORCH_CPU_WHEEL]
    kept = render(plan, tmp_path / "ctx")  # re-rendered without --wheelhouse: the wheels there are kept
    assert kept.context_hash == one.context_hash
    (wheels / TORCH_CPU_WHEEL).write_bytes(b"two")
    assert render(plan, tmp_path / "ctx", wheelhouse=wheels).context_hash != one.context_hash


def test_a_wheelhouse_without_wheels_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RenderError, match="holds no .whl"):
        render(resolve(Request(flavor="cpu", torch="2.13")), tmp_path / "ctx", wheelhouse=tmp_path / "empty")
    assert not (tmp_path / "ctx").exists()


def test_manifest_lists_every_input_with_its_hash(tmp_path):
    rendered = render(resolve(Request(accel_version="6.2", torch="2.4")), tmp_path / "ctx")
    manifest = json.loads((rendered.out_dir / "manifest.json").read_text())
    assert manifest == rendered.manifest
    assert manifest["cell"] == {
        "flavor": "rocm",
        "accel_version": "6.2",
        "torch": "2.4",
        "arch": "gfx90a",
        "python": "3.10",
    }
    assert manifest["torch"]["version"] == "2.4.1" and manifest["torch"]["git"]["ref"] == "v2.4.1"
    assert manifest["stack"]["transformers"].startswith("4.")
    on_disk = tree_digest(rendered.out_dir)
    hashed = {p: d for p, d in on_disk.items() if p != "manifest.json"}
    assert manifest["files"] == hashed
    assert {"Dockerfile", "requirements.lock", "patches/series", "common/apply_patches.sh"} <= set(hashed)
    assert any(p.startswith("workload/") for p in hashed)
    assert rendered.image_tag == f"envbuild/rocm6.2-torch2.4-gfx90a-py3.10:{rendered.context_hash[:12]}"
    dockerfile = rendered.dockerfile.read_text()
    assert f"io.envbuild.context-hash={rendered.context_hash}" in dockerfile
    assert f"io.envbuild.recipe-hash={manifest['recipe_hash']}" in dockerfile
    for label, value in manifest["labels"].items():
        assert label in dockerfile, label


def test_context_hash_is_reproducible_from_the_written_files(tmp_path):
    """Anyone can check a context: hash the files with the context-hash label of the Dockerfile and of the
    Apptainer definition emptied."""
    rendered = render(resolve(Request(flavor="cpu", torch="2.13")), tmp_path / "ctx")
    digests = tree_digest(rendered.out_dir)
    dockerfile = rendered.dockerfile.read_bytes().replace(rendered.context_hash.encode(), b'""')
    digests["Dockerfile"] = hashlib.sha256(dockerfile).hexdigest()
    definition = rendered.definition.read_bytes()
    assert definition.count(rendered.context_hash.encode()) == 1
    digests["cell.def"] = hashlib.sha256(definition.replace(rendered.context_hash.encode(), b"")).hexdigest()
    lines = "".join(f"{d}  {p}\n" for p, d in sorted(digests.items()) if p != "manifest.json")
    assert hashlib.sha256(lines.encode()).hexdigest() == rendered.context_hash


def test_refuses_to_replace_a_directory_that_is_not_a_context(tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(RenderError, match="not an envbuild build context"):
        render(resolve(Request(flavor="cpu", torch="2.13")), precious)
    assert [p.name for p in precious.iterdir()] == ["notes.txt"]


def test_source_build_context_carries_the_patch_series_and_wheel_context_does_not():
    source, _ = context_files(resolve(Request(accel_version="6.2", torch="2.4")))
    wheel, _ = context_files(resolve(Request(accel_version="6.2", torch="2.5")))
    assert "patches/series" in source and "patches/series" not in wheel
    assert b"AS torch-source-build" in source["Dockerfile"] and b"AS torch-wheel" not in source["Dockerfile"]
    assert b"AS torch-wheel" in wheel["Dockerfile"] and b"AS torch-source" not in wheel["Dockerfile"]
    assert b"ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/rocm6.2\n" in wheel["Dockerfile"]
    # a source build's index is that of its compile backend (pytorch-triton-rocm 3.0.0, recipes/torch.toml)
    assert b"ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/rocm6.1\n" in source["Dockerfile"]


#: what reaches the network from a build step (in its RUN line or the script it runs), comments left out
NETWORK_TOOLS = re.compile(
    r"\b(curl|wget|apt-get\s+(update|install|download)|apt_install|add-apt-repository|"
    r"amdgpu-install|git\s+(-C\s+\S+\s+)?(clone|fetch|submodule|pull)|"
    r"pip\s+(download|install|wheel)|pip_install)\b"
)


def _runs(dockerfile: str) -> list[str]:
    return [s for s in re.split(r"\n(?=[A-Z]+ )", dockerfile) if s.startswith("RUN ")]


def _step_text(run: str, files: dict[str, bytes]) -> tuple[str | None, str]:
    """(script name or None, the code that RUN executes without comments: its line plus the script it runs)."""
    script = re.search(r"/opt/envbuild/(?:common/)?([\w.-]+\.(?:sh|py))", run)
    name = script.group(1) if script else None
    body = ""
    if name:
        body = next(data.decode() for path, data in files.items() if path.rsplit("/", 1)[-1] == name)
    code = "\n".join(
        line.split("#", 1)[0] for line in (run + "\n" + body).splitlines() if not line.lstrip().startswith("#")
    )
    return name, code


@pytest.mark.parametrize(
    "request_",
    [
        Request(accel_version="6.2", torch="2.4"),
        Request(accel_version="6.2", torch="2.5"),
        Request(accel_version="6.1.2", torch="2.3", install_accel=True),
        Request(flavor="cpu", torch="2.13"),
    ],
    ids=["rocm-source", "rocm-wheel", "rocm-installer-source", "cpu"],
)
def test_no_build_step_uses_the_network_outside_the_declared_fetch_steps(request_):
    """Every RUN of a rendered context is grepped, with the script it runs, for network
    tools; only the steps the step model marks as fetching (builder.plan.steps, listed in the manifest) may use them,
    and only they get the proxy CA secret. The torch compile is offline: no network tool, every proxy variable
    at a closed port, and AOTriton's users switched off, so torch's cmake cannot download it."""
    from builder.plan.steps import fetch_steps

    plan = resolve(request_)
    files, manifest = context_files(plan)
    declared = fetch_steps(plan)
    runs = _runs(files["Dockerfile"].decode())
    assert runs
    seen = set()
    for run in runs:
        name, code = _step_text(run, files)
        seen.add(name)
        uses_network = NETWORK_TOOLS.search(code)
        if name not in declared:
            assert not uses_network, f"{name or run[:60]} uses {uses_network.group(0)!r} but is no declared fetch step"
            assert "envbuild_ca" not in run and "source=wheelhouse" not in run, name
        else:
            assert "--mount=type=secret,id=envbuild_ca,required=false" in run, name
    assert set(manifest["fetch_steps"]) == seen & set(declared)
    if "build_torch.sh" in seen:
        build = files["common/build_torch.sh"].decode()
        assert "export http_proxy=$offline https_proxy=$offline" in build and "PIP_NO_INDEX=1" in build
        assert "unset no_proxy NO_PROXY" in build
        env = manifest["torch"]["build_env"]
        assert env["USE_FLASH_ATTENTION"] == env["USE_MEM_EFF_ATTENTION"] == "0"
        assert "ENV " in _stage(files["Dockerfile"].decode(), "torch-source-build")
    pip_steps = [r for r in runs if re.search(r"install_python|install_torch|sentencepiece", r)]
    assert all("--mount=type=bind,source=wheelhouse,target=/wheelhouse" in s for s in pip_steps)
    copies = [s for s in re.split(r"\n(?=[A-Z]+ )", files["Dockerfile"].decode()) if s.startswith("COPY ")]
    assert copies and not any("envbuild_ca" in s or "/run/secrets" in s for s in copies)
    assert not any(b"BEGIN CERTIFICATE" in data for data in files.values())
    assert "# syntax=" not in files["Dockerfile"].decode()


def test_the_network_grep_sees_a_download_in_the_build_step():
    """The grep above is not blind: a curl, a git clone or a pip install added to the offline build step is found."""
    files, _ = context_files(resolve(Request(accel_version="6.2", torch="2.4")))
    run = next(r for r in _runs(files["Dockerfile"].decode()) if "build_torch.sh" in r)
    for added in (
        "curl -fsSL https://example.org/aotriton.tar.gz",
        "git clone https://example.org/x.git",
        "pip_install aotriton",
        "python -m pip install x",
        "git -C /src fetch origin",
    ):
        edited = {**files, "common/build_torch.sh": files["common/build_torch.sh"] + f"\n{added}\n".encode()}
        assert NETWORK_TOOLS.search(_step_text(run, edited)[1]), added
    assert not NETWORK_TOOLS.search(_step_text(run, files)[1])


def test_install_scripts_are_valid_bash():
    for script in sorted((IMAGES_DIR / "common").glob("*.sh")):
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, f"{script.name}: {result.stderr}"


@pytest.mark.parametrize("name", sorted(GOLDEN_CELLS))
def test_every_copy_source_is_in_the_context_and_no_unused_script_is(name):
    files, _ = context_files(resolve(GOLDEN_CELLS[name]), golden_static())
    dockerfile = files["Dockerfile"].decode()
    sources = set()
    for line in dockerfile.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            sources.update(line.split()[1:-1])
    for source in sources:
        assert source in files or any(p.startswith(source) for p in files), source
    scripts = {p for p in files if p.startswith("common/")}
    assert scripts == {s for s in sources if s.startswith("common/")}


def _stage(dockerfile: str, name: str) -> str:
    """The text of one stage of a rendered Dockerfile (from its FROM line to the next stage's comment)."""
    start = dockerfile.index(f" AS {name}\n")
    end = dockerfile.find("\n# --- ", start)
    return dockerfile[start:] if end == -1 else dockerfile[start:end]


def _stage_args(dockerfile: str, stage: str) -> dict[str, str]:
    """The top-level ARG defaults a stage reads (the `ARG NAME` lines inside it)."""
    defaults = dict(re.findall(r"^ARG ([A-Z_]+)=(.*)$", dockerfile.split("\nFROM ", 1)[0], re.M))
    return {name: defaults.get(name, "") for name in re.findall(r"^ARG ([A-Z_]+)$", _stage(dockerfile, stage), re.M)}


#: every stage up to and including the one that builds the torch wheel, and the one that installs it
TORCH_STAGES = ("base", "torch-src", "torch-source-build", "torch-source")


def test_a_relock_with_a_new_date_and_hf_pin_leaves_every_torch_stage_byte_identical(tmp_path):
    """`envbuild lock` writes a new exclude-newer date on every re-resolve, and a change
    to the HF stack re-locks. Neither may reach a layer up to the torch wheel (hours of build): those stages'
    text, the top-level ARG values they read and every file they COPY stay byte-identical."""
    import shutil
    from datetime import datetime, timedelta

    from builder.paths import RECIPES_DIR
    from builder.plan.lock import read, resolve_lock, write_lock
    from builder.plan.recipes import load

    plan = resolve(Request(accel_version="6.2", torch="2.4"))
    root = tmp_path / "recipes"
    shutil.copytree(RECIPES_DIR, root)
    stack = (root / "hf-stack.toml").read_text().replace('transformers = "4.44.2"', 'transformers = "4.44.1"')
    (root / "hf-stack.toml").write_text(stack)
    # the changed pin needs its lock resolved again (uv against PyPI), on another day than the committed lock
    committed = read(load(), "2.4", "3.10").header["exclude-newer"]
    later = (datetime.strptime(committed, "%Y-%m-%dT%H:%M:%SZ") - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    write_lock(load(root), "2.4", "3.10", resolve_lock(load(root), "2.4", "3.10", later))
    other = resolve(Request(accel_version="6.2", torch="2.4"), load(root))
    assert other.stack["transformers"] == "4.44.1" != plan.stack["transformers"]
    before, _ = context_files(plan, golden_static())
    after, _ = context_files(other, golden_static())
    assert before["requirements.lock"] != after["requirements.lock"]
    assert committed in before["requirements.lock"].decode() and later in after["requirements.lock"].decode()
    assert before["Dockerfile"] != after["Dockerfile"]
    _assert_torch_stages_identical(before, after)
    for name in TORCH_STAGES:
        text = _stage(before["Dockerfile"].decode(), name)
        assert "requirements.lock" not in text and "expect.json" not in text, name


def _assert_torch_stages_identical(before: dict[str, bytes], after: dict[str, bytes]) -> None:
    """Every stage up to the installed torch wheel renders byte-identical in two contexts: its text, the
    top-level ARG values it reads and every file it COPYs (so BuildKit reuses those layers)."""
    old, new = before["Dockerfile"].decode(), after["Dockerfile"].decode()
    for name in TORCH_STAGES:
        text = _stage(old, name)
        assert text == _stage(new, name), name
        assert _stage_args(old, name) == _stage_args(new, name), name
        copied = [
            p for source in re.findall(r"^COPY (?!--from)(.+) /opt/envbuild/", text, re.M) for p in source.split()
        ]
        assert "venv.lock" in copied or name != "base"
        for path in copied:
            paths = [p for p in before if p == path or p.startswith(path)]
            assert paths and all(before[p] == after[p] for p in paths), path


@pytest.mark.parametrize(
    "rocm,line,pin,index",
    [
        ("6.1.2", "2.3", "2.3.1", "rocm6.0"),
        ("6.2", "2.3", "2.3.1", "rocm6.0"),
        ("6.2", "2.4", "3.0.0", "rocm6.1"),
        ("6.2", "2.6", "3.2.0", "rocm6.2.4"),
    ],
)
def test_a_source_cell_installs_its_releases_triton_after_the_torch_build(rocm, line, pin, index):
    """Each source cell installs the pytorch-triton-rocm the
    official ROCm wheel of its release requires (recipes/torch.toml, with the peer record), by exact version from
    the PyTorch index that carries it, --no-deps, in a stage of its own after the torch wheel is installed; the
    image's verify step imports it, and torch.compile is no longer marked unavailable."""
    plan = resolve(Request(accel_version=rocm, torch=line))
    files, manifest = context_files(plan, golden_static())
    dockerfile = files["Dockerfile"].decode()
    url = f"https://download.pytorch.org/whl/{index}"
    assert plan.stages == (
        "base",
        "torch-src",
        "torch-source-build",
        "torch-source",
        "torch-compile",
        "sentencepiece",
        "runtime",
    )
    assert f"\nARG TORCH_COMPILE_PACKAGE=pytorch-triton-rocm=={pin}\n" in dockerfile.split("\nFROM ", 1)[0]
    stage = _stage(dockerfile, "torch-compile")
    assert stage.startswith(" AS torch-compile") and "FROM torch-source AS torch-compile" in dockerfile
    assert f"ARG TORCH_INDEX_URL={url}\n" in stage and "ARG TORCH_COMPILE_PACKAGE\n" in stage
    assert "bash /opt/envbuild/common/install_torch_compile.sh" in stage
    assert "FROM torch-compile AS runtime" in dockerfile
    assert not any(
        "TORCH_COMPILE_PACKAGE" in _stage(dockerfile, name) or "torch_compile" in _stage(dockerfile, name)
        for name in TORCH_STAGES
    )
    script = files["common/install_torch_compile.sh"].decode()
    install = next(line for line in script.splitlines() if "pip install" in line)
    assert "--no-deps" in install and '--index-url "$TORCH_INDEX_URL"' in install
    assert "install_torch_compile.sh" in manifest["fetch_steps"]
    expect = json.loads(files["expect.json"])
    assert expect["compile_package"] == {"name": "pytorch-triton-rocm", "version": pin, "import": "triton"}
    assert expect["compile_unavailable"] is None
    assert "ENVBUILD_TORCH_COMPILE_UNAVAILABLE" not in dockerfile and "io.envbuild.torch-compile" not in dockerfile
    compile_ = manifest["torch"]["compile"]
    assert compile_["available"] and compile_["requirement"] == f"pytorch-triton-rocm=={pin}"
    assert "mila-iqia/milabench" in compile_["checked"] and f"pytorch-triton-rocm=={pin}" in compile_["checked"]


def _recipes_with_torch_line(tmp_path, line: str, edit) -> Recipes:
    """recipes/ copied under tmp_path with torch.toml's table of `line` passed through `edit`, loaded."""
    import shutil

    from builder.paths import RECIPES_DIR
    from builder.plan.recipes import load

    root = tmp_path / "recipes"
    shutil.copytree(RECIPES_DIR, root)
    text = (root / "torch.toml").read_text()
    head = f'[torch."{line}"]\n'
    start = text.index(head)
    end = text.find("\n[torch.", start + 1)
    end = len(text) if end == -1 else end
    (root / "torch.toml").write_text(text[:start] + edit(text[start:end]) + text[end:])
    return load(root)


def test_a_triton_pin_change_rebuilds_no_torch(tmp_path):
    """The Triton stage comes after the torch wheel: another pin changes the torch-compile stage and the image,
    never a stage up to the installed torch."""
    plan = resolve(Request(accel_version="6.2", torch="2.4"))
    other = resolve(
        Request(accel_version="6.2", torch="2.4"),
        _recipes_with_torch_line(
            tmp_path, "2.4", lambda t: t.replace('compile_version = "3.0.0"', 'compile_version = "3.0.1"')
        ),
    )
    before, _ = context_files(plan, golden_static())
    after, _ = context_files(other, golden_static())
    assert b"pytorch-triton-rocm==3.0.1" in after["Dockerfile"] and before["Dockerfile"] != after["Dockerfile"]
    _assert_torch_stages_identical(before, after)


def test_a_source_cell_whose_triton_pin_is_not_verified_keeps_torch_compile_off(tmp_path):
    """A torch line without a verified compile_version installs no Triton: no torch-compile stage, no index, and
    the image, its labels, expect.json and the manifest say torch.compile is unavailable and why."""
    recipes = _recipes_with_torch_line(
        tmp_path, "2.4", lambda t: "\n".join(line for line in t.splitlines() if not line.startswith("compile_")) + "\n"
    )
    plan = resolve(Request(accel_version="6.2", torch="2.4"), recipes)
    assert "torch-compile" not in plan.stages and plan.torch_stage == "torch-source"
    assert "pin not verified" in plan.compile_unavailable
    files, manifest = context_files(plan, golden_static())
    dockerfile = files["Dockerfile"].decode()
    assert "AS torch-compile" not in dockerfile and "TORCH_COMPILE_PACKAGE" not in dockerfile
    assert "common/install_torch_compile.sh" not in files
    assert "\nARG TORCH_INDEX_URL=\n" in dockerfile and "FROM torch-source AS runtime" in dockerfile
    assert f'ENVBUILD_TORCH_COMPILE_UNAVAILABLE="{plan.compile_unavailable}"' in dockerfile
    expect = json.loads(files["expect.json"])
    assert expect["compile_package"] is None and "pin not verified" in expect["compile_unavailable"]
    assert manifest["torch"]["compile"] == {
        "available": False,
        "reason": plan.compile_unavailable,
        "requirement": None,
        "checked": None,
    }


def test_source_build_pins_cmake_below_4_for_the_torch_build(tmp_path):
    """Defect 3: cmake 4.x rejects the old cmake_minimum_required of torch 2.3-2.6's third-party code. pip
    resolves, from PyPI, what install_torch_build_deps.sh asks for -- the tag's requirements.txt naming plain `cmake`,
    constrained and extended by the rendered TORCH_BUILD_PINS -- and gets a 3.x cmake (without the pins:
    the newest, 4.x)."""
    plan = resolve(Request(accel_version="6.2", torch="2.4"))
    dockerfile = context_files(plan)[0]["Dockerfile"].decode()
    assert "ARG TORCH_BUILD_PINS\n" in _stage(dockerfile, "torch-source-build")
    pins = re.search(r'^ARG TORCH_BUILD_PINS="(.+)"$', dockerfile, re.M).group(1).split()
    script = (IMAGES_DIR / "common" / "install_torch_build_deps.sh").read_text()
    assert 'pip_install -c "$constraints" -r requirements.txt "${pins[@]}"' in script  # the command below
    (tmp_path / "requirements.txt").write_text("cmake\nninja\n")
    (tmp_path / "constraints.txt").write_text("\n".join(pins) + "\n")

    def resolved(*extra: str) -> dict[str, str]:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--ignore-installed",
                "-q",
                "--report",
                str(tmp_path / "report.json"),
                "-r",
                str(tmp_path / "requirements.txt"),
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        report = json.loads((tmp_path / "report.json").read_text())
        return {i["metadata"]["name"]: i["metadata"]["version"] for i in report["install"]}

    assert resolved("-c", str(tmp_path / "constraints.txt"), *pins)["cmake"] == "3.31.10"
    assert int(resolved()["cmake"].split(".")[0]) >= 4  # what an unpinned build got


@pytest.mark.parametrize("name", sorted(GOLDEN_CELLS))
def test_expect_json_names_no_cuda_package(name):
    """What the image checks names no nvidia-*/triton package (PyPI's CUDA torch needs
    them; a ROCm or CPU torch never installs them); the manifest keeps them only as what the lock left out."""
    files, manifest = context_files(resolve(GOLDEN_CELLS[name]), golden_static())
    expect = json.loads(files["expect.json"])
    pinned = {*expect["lock"], *expect["venv"]}
    assert not {n for n in pinned if n.startswith("nvidia") or n == "triton"}, pinned
    assert "nvidia" not in files["expect.json"].decode()
    # a ROCm source cell's compile backend is PyTorch's ROCm build of Triton, never PyPI's CUDA `triton`
    package = expect["compile_package"]
    assert package is None or (package["name"], package["import"]) == ("pytorch-triton-rocm", "triton")
    assert "triton" in manifest["lock"]["left_out_cuda_requirements"]


def test_an_images_content_hash_is_read_by_its_one_label_name_and_by_the_legacy_one():
    from builder.plan.context import CONTEXT_HASH_LABEL, LEGACY_CONTEXT_HASH_LABEL, context_hash_of

    assert CONTEXT_HASH_LABEL == "io.envbuild.context-hash"
    assert context_hash_of({CONTEXT_HASH_LABEL: "a" * 64, LEGACY_CONTEXT_HASH_LABEL: "b" * 64}) == "a" * 64
    assert context_hash_of({LEGACY_CONTEXT_HASH_LABEL: "b" * 64}) == "b" * 64
    assert context_hash_of({"io.envbuild.recipe-hash": "c" * 64}) is None and context_hash_of(None) is None
