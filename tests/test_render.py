"""Rendering: golden files, determinism, content hash, manifest, wheelhouse and output-dir handling.

Regenerate the golden files after an intended change: ENVBUILD_UPDATE_GOLDEN=1 pytest tests/test_render.py
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
        assert actual == golden.read_text(), f"{file} of {name} differs from {golden} (ENVBUILD_UPDATE_GOLDEN=1 to accept)"


def test_golden_routes_are_the_ones_the_issue_names():
    routes = {name: resolve(req).torch_source for name, req in GOLDEN_CELLS.items()}
    assert routes == {
        "rocm6.1.2-torch2.3-source": "source",
        "rocm6.2-torch2.4-source": "source",
        "rocm6.2-torch2.5-wheel": "wheel",
        "cpu-torch2.13": "wheel",
    }


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
    assert after_workload == ["RUN python /opt/envbuild/verify_image.py /opt/envbuild/expect.json /opt/envbuild/verify.json"]


TORCH_CPU_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def test_wheelhouse_is_hashed_into_the_tag_and_names_torch_origin(tmp_path):
    """Same tag => same wheels: a wheel in wheelhouse/ changes the content hash, and the manifest says torch
    comes from that file (with its sha256) instead of the index."""
    plan = resolve(Request(flavor="cpu", torch="2.13"))
    bare = render(plan, tmp_path / "ctx")
    assert bare.manifest["torch_origin"] == {"from": "index", "index_url": "https://download.pytorch.org/whl/cpu",
                                             "requirement": "torch==2.13.0+cpu"}
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / TORCH_CPU_WHEEL).write_bytes(b"one")
    (wheels / "notes.txt").write_text("not a wheel")
    one = render(plan, tmp_path / "ctx", wheelhouse=wheels)
    digest = hashlib.sha256(b"one").hexdigest()
    assert one.context_hash != bare.context_hash
    assert one.manifest["files"][f"wheelhouse/{TORCH_CPU_WHEEL}"] == digest
    assert one.manifest["torch_origin"] == {"from": "wheelhouse", "file": f"wheelhouse/{TORCH_CPU_WHEEL}",
                                            "sha256": digest}
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
        "flavor": "rocm", "accel_version": "6.2", "torch": "2.4", "arch": "gfx90a", "python": "3.10"
    }
    assert manifest["torch"]["version"] == "2.4.1" and manifest["torch"]["git_tag"] == "v2.4.1"
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
    """Anyone can check a context: hash the files with the Dockerfile's context-hash label emptied."""
    rendered = render(resolve(Request(flavor="cpu", torch="2.13")), tmp_path / "ctx")
    digests = tree_digest(rendered.out_dir)
    dockerfile = rendered.dockerfile.read_bytes().replace(rendered.context_hash.encode(), b'""')
    digests["Dockerfile"] = hashlib.sha256(dockerfile).hexdigest()
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
    assert b"ARG TORCH_INDEX_URL=\n" in source["Dockerfile"]


def test_every_network_step_mounts_the_optional_ca_secret_and_pip_steps_the_wheelhouse():
    files, _ = context_files(resolve(Request(accel_version="6.2", torch="2.4")))
    steps = re.split(r"\n(?=[A-Z]+ )", files["Dockerfile"].decode())
    runs = [s for s in steps if s.startswith("RUN ") and not s.startswith("RUN python")]  # verify: offline
    assert len(runs) == 11 and all("--mount=type=secret,id=envbuild_ca,required=false" in s for s in runs)
    pip_steps = [s for s in runs if re.search(r"install_python|install_torch|build_torch|sentencepiece", s)]
    assert len(pip_steps) == 5
    assert all("--mount=type=bind,source=wheelhouse,target=/wheelhouse" in s for s in pip_steps)
    copies = [s for s in steps if s.startswith("COPY ")]
    assert copies and not any("envbuild_ca" in s or "/run/secrets" in s for s in copies)
    assert not any(b"BEGIN CERTIFICATE" in data for data in files.values())
    assert "# syntax=" not in files["Dockerfile"].decode()


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


def test_the_torch_build_stages_do_not_depend_on_the_hf_stack(tmp_path):
    """Defect 6: the hours-long torch build must not rebuild when only the HF stack changes: its stages COPY
    no requirements.lock, and their text and the files they copy stay the same under another stack."""
    import shutil

    from builder.paths import RECIPES_DIR
    from builder.plan.lock import read, resolve_lock, write_lock
    from builder.plan.recipes import load

    plan = resolve(Request(accel_version="6.2", torch="2.4"))
    root = tmp_path / "recipes"
    shutil.copytree(RECIPES_DIR, root)
    stack = (root / "hf-stack.toml").read_text().replace('transformers = "4.44.2"', 'transformers = "4.44.1"')
    (root / "hf-stack.toml").write_text(stack)
    # the changed pin needs its lock resolved again (uv against PyPI), as of the committed lock's date
    date = read(load(), "2.4", "3.10").header["exclude-newer"]
    write_lock(load(root), "2.4", "3.10", resolve_lock(load(root), "2.4", "3.10", date))
    other = resolve(Request(accel_version="6.2", torch="2.4"), load(root))
    assert other.stack["transformers"] == "4.44.1" != plan.stack["transformers"]
    before, _ = context_files(plan, golden_static())
    after, _ = context_files(other, golden_static())
    assert before["requirements.lock"] != after["requirements.lock"]
    for name in ("base", "torch-src", "torch-source-build", "torch-source"):
        text = _stage(before["Dockerfile"].decode(), name)
        assert "requirements.lock" not in text and "expect.json" not in text, name
        assert text == _stage(after["Dockerfile"].decode(), name), name
        for source in re.findall(r"^COPY (?!--from)(.+) /opt/envbuild/", text, re.M):
            for path in source.split():
                assert all(before[p] == after[p] for p in before if p == path or p.startswith(path)), path


def test_source_build_pins_cmake_below_4_for_the_torch_build(tmp_path):
    """Defect 3: cmake 4.x rejects the old cmake_minimum_required of torch 2.3-2.6's third-party code. pip
    resolves, from PyPI, what build_torch.sh asks for -- the tag's requirements.txt naming plain `cmake`,
    constrained and extended by the rendered TORCH_BUILD_PINS -- and gets a 3.x cmake (without the pins:
    the newest, 4.x)."""
    plan = resolve(Request(accel_version="6.2", torch="2.4"))
    dockerfile = context_files(plan)[0]["Dockerfile"].decode()
    assert "ARG TORCH_BUILD_PINS\n" in _stage(dockerfile, "torch-source-build")
    pins = re.search(r'^ARG TORCH_BUILD_PINS="(.+)"$', dockerfile, re.M).group(1).split()
    script = (IMAGES_DIR / "common" / "build_torch.sh").read_text()
    assert 'pip_install -c "$constraints" -r requirements.txt "${pins[@]}"' in script  # the command below
    (tmp_path / "requirements.txt").write_text("cmake\nninja\n")
    (tmp_path / "constraints.txt").write_text("\n".join(pins) + "\n")

    def resolved(*extra: str) -> dict[str, str]:
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
                               "--report", str(tmp_path / "report.json"), "-r", str(tmp_path / "requirements.txt"),
                               *extra], capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        report = json.loads((tmp_path / "report.json").read_text())
        return {i["metadata"]["name"]: i["metadata"]["version"] for i in report["install"]}

    assert resolved("-c", str(tmp_path / "constraints.txt"), *pins)["cmake"] == "3.31.10"
    assert int(resolved()["cmake"].split(".")[0]) >= 4  # what an unpinned build got
