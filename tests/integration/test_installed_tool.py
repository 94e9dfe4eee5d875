"""envbuild installed like a tool: the wheel built from this tree, installed non-editable into a fresh venv,
works from a folder outside the clone (its recipes, templates, CI data and published results ship inside it).

The fresh venv gets only the wheel; its dependencies are the locked ones of the venv running the tests, made
visible by a path line (not a site dir: the editable envbuild's own .pth files there are not processed), so no
copy of the source tree can be imported."""

from __future__ import annotations

import json
import re
import signal
import time
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from builder.plan.cells import Cell
from repo import REPO_ROOT

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from this tree."""
    root = tmp_path_factory.mktemp("wheel")
    src, dist = root / "src", root / "dist"  # a copy: setuptools writes build/ and *.egg-info beside the sources
    for name in ("pyproject.toml", "README.md"):
        (src / name).parent.mkdir(exist_ok=True)
        shutil.copy2(REPO_ROOT / name, src / name)
    for name in ("builder", "workload", "recipes", "images", "ci", "results"):
        shutil.copytree(
            REPO_ROOT / name, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return next(dist.glob("envbuild-*.whl"))


def _venv_with(root: Path, wheel: Path, deps: Path) -> tuple[Path, Path]:
    """A fresh venv holding only `wheel`, its dependencies visible through a path line to `deps`; (its python,
    its purelib)."""
    env_dir = root / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (purelib / "locked-deps.pth").write_text(f"{deps}\n")
    return python, purelib


@pytest.fixture(scope="module")
def installed(tmp_path_factory, wheel):
    """(envbuild executable, environment, a folder outside the clone)."""
    root = tmp_path_factory.mktemp("installed")
    env_dir = root / "venv"
    _venv_with(root, wheel, Path(sysconfig.get_paths()["purelib"]))
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ENVBUILD_HOME", "ENVBUILD_RECIPES")}
    return env_dir / "bin" / "envbuild", env, elsewhere


def _run(installed, *args, timeout=600):
    exe, env, cwd = installed
    return subprocess.run([str(exe), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_wheel_imports_itself_not_the_clone(installed):
    exe, env, cwd = installed
    where = subprocess.run(
        [
            str(exe.parent / "python"),
            "-c",
            "import builder, workload; print(builder.__file__);print(workload.__file__)",
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    for line in where.stdout.split():
        assert Path(line).is_relative_to(exe.parent.parent) and not Path(line).is_relative_to(REPO_ROOT), line
    data = exe.parent.parent.glob("lib/python*/site-packages/builder/_data/recipes/flavors.toml")
    assert [p for p in data if not p.is_symlink()]  # a copy in the wheel, not a link back to the tree


def test_help_recipes_and_render_work_outside_the_clone(installed, tmp_path):
    assert _run(installed, "--help").returncode == 0
    listed = _run(installed, "recipes", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert "cpu-torch2.13-py3.11" in {row["cell"] for row in json.loads(listed.stdout)}
    rendered = _run(installed, "render", "--flavor", "cpu", "--torch", "2.13", "-o", str(tmp_path / "ctx"))
    assert rendered.returncode == 0, rendered.stderr
    # the same request rendered from the source tree gives the same context hash
    tree = subprocess.run(
        [
            sys.executable,
            "-c",
            "from builder.cli import main; main()",
            "render",
            "--flavor",
            "cpu",
            "--torch",
            "2.13",
            "-o",
            str(tmp_path / "tree-ctx"),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tree.returncode == 0, tree.stderr
    manifests = [json.loads((tmp_path / d / "manifest.json").read_text()) for d in ("ctx", "tree-ctx")]
    assert manifests[0]["context_hash"] == manifests[1]["context_hash"]


@pytest.fixture(scope="module")
def local_run(installed):
    """`envbuild run workload --local --out run-local` outside the clone, once for the module: its result.json."""
    run = _run(installed, "run", "workload", "--local", "--out", "run-local")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "recorded in envbuild-matrix.db" in run.stdout + run.stderr
    return installed[2] / "run-local" / "result.json"


def test_a_local_run_is_recorded_and_reported_outside_the_clone(installed, local_run):
    exe, _, cwd = installed
    assert (cwd / "envbuild-matrix.db").is_file() and local_run.is_file()
    report = _run(installed, "report", "-o", "site")
    assert report.returncode == 0, report.stderr
    assert (cwd / "site" / "index.html").is_file()
    # outside a clone there is no ./results to verify: say so (exit 2) rather than check the bundled files and pass
    verify = _run(installed, "matrix", "verify")
    assert verify.returncode == 2 and "no ./results folder here" in verify.stderr, verify.stdout + verify.stderr
    (bundled,) = exe.parent.parent.glob("lib/python*/site-packages/builder/_data/results")
    verify = _run(installed, "matrix", "verify", str(bundled))  # the published results and their signers ship too
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "(bundled with this envbuild; no ./results/allowed_signers here)" in verify.stderr


def _clone_results(folder: Path, key: Path, principal: str) -> Path:
    """A contributor's clone as the installed tool sees it: the project's results/ with the contributor's key line
    added to results/allowed_signers (CONTRIBUTING.md, "Your key in results/allowed_signers")."""
    shutil.copytree(REPO_ROOT / "results", folder / "results")
    public = " ".join(Path(f"{key}.pub").read_text().split()[:2])
    with open(folder / "results" / "allowed_signers", "a") as handle:
        handle.write(f'# {principal}: contributed results\n{principal} namespaces="envbuild" {public}\n')
    return folder


def _key(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    return path


def _in(folder: Path, installed, *args, env=None, timeout=600):
    exe, base_env, _ = installed
    return subprocess.run(
        [str(exe), *map(str, args)],
        cwd=folder,
        env={**base_env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_contributings_shortest_path_works_from_the_installed_tool(installed, local_run, tmp_path):
    """CONTRIBUTING.md's shortest path, from the wheel installed like pipx does, in a clone, with stand-ins: a fake
    MI250X host (two gfx90a GPUs in a KFD topology) for `doctor --root`, and `run workload --local` on this machine's
    CPU for the run on the GPU. The contributor's key is only in the clone's results/allowed_signers: verify and
    import use that file (and say so), not the one bundled with the tool."""
    from tests.engine.test_doctor import fake_gpu_host

    clone = _clone_results(tmp_path / "envbuild", _key(tmp_path / "id_ed25519"), "you@example.org")
    host = fake_gpu_host(tmp_path / "mi250x-host")
    doctor = _in(clone, installed, "doctor", "--no-engine", "--root", host)
    assert doctor.returncode == 0 and "gfx90a" in doctor.stdout + doctor.stderr, doctor.stdout + doctor.stderr
    shutil.copytree(local_run.parent, clone / "run-mi250x")
    command = "envbuild run workload --local --out run-mi250x"
    published = _in(
        clone,
        installed,
        "matrix",
        "publish",
        "run-mi250x/result.json",
        "--name",
        "mi250x-smoke",
        "--sign",
        tmp_path / "id_ed25519",
        "--command",
        command,
    )
    assert published.returncode == 0, published.stdout + published.stderr
    key = Cell.from_result(json.loads(local_run.read_text())).key  # the cell of the device that ran
    folder = clone / "results" / key / "mi250x-smoke"
    assert sorted(p.name for p in folder.iterdir()) == ["result.json", "result.json.intoto.jsonl"]
    one = _in(clone, installed, "matrix", "verify", f"results/{key}/mi250x-smoke")
    assert one.returncode == 0, one.stdout + one.stderr
    assert "contributed, signed by you@example.org" in one.stdout
    assert "signers: results/allowed_signers (the working folder's results/)" in one.stderr
    every = _in(clone, installed, "matrix", "verify")  # no path: ./results, the project's results and yours
    assert every.returncode == 0, every.stdout + every.stderr
    assert f"results/{key}/mi250x-smoke/result.json: contributed" in every.stdout
    imported = _in(clone, installed, "matrix", "import", "--db", tmp_path / "fresh.db", "results")
    assert imported.returncode == 0, imported.stdout + imported.stderr
    report = _in(clone, installed, "report", "--db", tmp_path / "fresh.db", "-o", tmp_path / "site")
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "site" / "cells" / f"{key}.html").read_text()
    assert "contributed, signed by you@example.org" in page


@pytest.mark.parametrize("when, presses", [("the first step", 1), ("the last step", 1), ("the first step", 3)])
def test_ctrl_c_in_the_installed_tool_records_an_interrupted_attempt(installed, when, presses):
    """A terminal's Ctrl-C reaches the whole process group (envbuild and its workload), during training or after
    its last step, once or pressed again while the run stops: the run exits 130 and is recorded as an
    `interrupted` attempt."""
    exe, env, cwd = installed
    folder = cwd / f"{when.replace(' ', '-')}-{presses}"
    folder.mkdir()
    proc = subprocess.Popen(
        [
            str(exe),
            "run",
            "workload",
            "--local",
            "--out",
            "out",
            "--",
            "--max-steps",
            "40",
            "--min-accuracy",
            "0",
            "--no-probes",
        ],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    pattern = re.compile(r"step \d+/\d+" if when == "the first step" else r"step (\d+)/\1\b")
    deadline, seen = time.monotonic() + 300, ""
    while time.monotonic() < deadline and not pattern.search(seen):
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    for _ in range(presses):
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.5)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, seen + output
    assert "before the workload started" not in output, seen + output
    record = json.loads((folder / "out" / "result.json").read_text())
    assert record["error_class"] == "interrupted", record.get("error")
    exported = subprocess.run(
        [str(exe), "matrix", "export", "--json"], cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )
    assert exported.returncode == 0 and record["run_id"] in exported.stdout, exported.stdout + exported.stderr


CA = Path("/etc/ssl/certs/ca-certificates.crt")
CPU_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")  # the CPU index's file, here
INJECTED = (
    'echo "injected by the test: the step fails here <script>alert(1)</script> & more"\n'
    'echo "fatal error: injected.h: No such file or directory" >&2\n'
    "exit 3\n"
)


def _injected_tree(folder: Path) -> Path:
    """A data tree (ENVBUILD_HOME) whose ROCm key-refresh step fails at once: the first RUN of a ROCm cell. The cpu
    cell's context does not hold that script, so it renders to the same hash from this tree as from the wheel."""
    for name in ("recipes", "images", "ci", "results", "workload"):
        shutil.copytree(REPO_ROOT / name, folder / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    script = folder / "images" / "common" / "refresh_apt_key.sh"
    head = 'source "$(dirname "$0")/lib.sh"\n'
    text = script.read_text()
    assert head in text
    script.write_text(text.replace(head, head + INJECTED, 1))
    return folder


def _record_path(build: subprocess.CompletedProcess, folder: Path) -> Path:
    found = re.search(r"^build record: (\S+build-record\.json) ", build.stderr, re.M)
    assert found, build.stderr[-3000:]
    return folder / found.group(1)


@pytest.mark.docker
def test_a_passing_and_a_failing_build_come_home_from_the_installed_tool(installed, local_base, tmp_path):
    """`envbuild image` of the cpu cell (a pass; BuildKit's cache makes it quick after test_build_cpu_cell) and of a
    ROCm cell whose first step is made to fail, from the installed tool; each build record published with --sign,
    verified, imported and shown on its cell's ladder. Real engine, real ssh-keygen keys."""
    home = _clone_results(tmp_path / "envbuild", _key(tmp_path / "id_ed25519"), "owner@example.org")
    tree = {"ENVBUILD_HOME": str(_injected_tree(tmp_path / "tree"))}
    wheels = home / "wheels"
    source = Path(os.environ.get("ENVBUILD_TEST_WHEELHOUSE", "/opt/wheels")) / CPU_WHEEL.name
    common = ["--base-image", local_base, "--network", "host", "--db", "m.db", "--force"]
    common += ["--ca-cert", str(CA)] if CA.is_file() else []
    if source.is_file():  # torch from the wheelhouse, as test_build_cpu_cell builds it (same context, same cache)
        wheels.mkdir()
        try:
            os.link(source, wheels / CPU_WHEEL.name)
        except OSError:
            shutil.copy(source, wheels / CPU_WHEEL.name)
    started = time.monotonic()
    passing = _in(
        home,
        installed,
        "image",
        "--flavor",
        "cpu",
        "--torch",
        "2.13",
        "-o",
        "ctx-cpu",
        *common,
        *(["--wheelhouse", "wheels"] if wheels.is_dir() else []),
        timeout=1800,
    )
    assert passing.returncode == 0, passing.stderr[-3000:]
    seconds = {"cpu build": time.monotonic() - started}
    started = time.monotonic()
    failing = _in(home, installed, "image", "--rocm", "6.2", "--torch", "2.5", "-o", "ctx-rocm", *common, env=tree)
    assert failing.returncode == 1, failing.stderr[-3000:]
    seconds["rocm build (fails)"] = time.monotonic() - started
    records = {"pass": _record_path(passing, home), "fail": _record_path(failing, home)}
    docs = {k: json.loads(p.read_text()) for k, p in records.items()}
    assert docs["pass"]["status"] == "pass" and docs["pass"]["image"]["digest"].startswith("sha256:")
    assert docs["pass"]["ccache"] == {"measured": False, "note": docs["pass"]["ccache"]["note"]}
    assert docs["pass"]["memory"]["peak_bytes"] >= docs["pass"]["memory"]["start_bytes"] > 0
    assert docs["pass"]["verify_checks"] >= 5 and docs["pass"]["wall_time_s"] > 0
    failure = docs["fail"]["failure"]
    assert (failure["failure_class"], docs["fail"]["image"]) == ("compile_error", None)
    assert "refresh_apt_key.sh" in failure["step"]
    assert "fatal error: injected.h: No such file or directory" in failure["log_tail"]

    started = time.monotonic()
    for kind, name, env in (("pass", "owner-cpu-build", None), ("fail", "owner-rocm-build", tree)):
        out = _in(
            home,
            installed,
            "matrix",
            "publish",
            records[kind],
            "--name",
            name,
            "--sign",
            tmp_path / "id_ed25519",
            "--command",
            f"envbuild image ({kind})",
            env=env,
        )
        assert out.returncode == 0, out.stdout + out.stderr
    verified = _in(home, installed, "matrix", "verify", env=tree)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "signers: results/allowed_signers (the working folder's results/)" in verified.stderr
    for key, status in (("cpu-torch2.13-py3.11", "pass"), ("rocm6.2-torch2.5-gfx90a-py3.10", "fail")):
        assert "contributed, signed by owner@example.org" in verified.stdout
        assert f"build of {key} ({status}), its context recomputed by the recipes in use" in verified.stdout
    imported = _in(home, installed, "matrix", "import", "--db", "fresh.db", "results", env=tree)
    assert imported.returncode == 0 and "2 new build(s)" in imported.stdout, imported.stdout + imported.stderr
    report = _in(home, installed, "report", "--db", "fresh.db", "-o", "site", env=tree)
    assert report.returncode == 0, report.stderr
    seconds["publish x2, verify, import, report"] = time.monotonic() - started
    cpu = (home / "site" / "cells" / "cpu-torch2.13-py3.11.html").read_text()
    assert re.search(r'data-step="3" data-state="done"><td>3 image built</td>.*?built by owner@example\.org', cpu, re.S)
    rocm = (home / "site" / "cells" / "rocm6.2-torch2.5-gfx90a-py3.10.html").read_text()
    step = re.search(r'<tr class="step-failed" data-step="3".*?</tr>', rocm, re.S).group(0)
    assert "a build signed by owner@example.org failed at step" in step and "refresh_apt_key.sh" in step
    assert "the step fails here &lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in step and "<script>" not in rocm
    assert re.search(r'id="next-commands">envbuild image --rocm 6\.2 --torch 2\.5', rocm)
    # without the tree that built it, the failing record's context is no cell here: refused, nothing imported
    foreign = _in(home, installed, "matrix", "import", "--db", "other.db", "results")
    assert foreign.returncode == 1 and "[cell]" in foreign.stdout + foreign.stderr and not (home / "other.db").exists()
    print("build record loop, seconds:", {k: round(v, 1) for k, v in seconds.items()})


#: What `envbuild[workload]` adds to a plain install: never in the light tool's environment.
WORKLOAD_ONLY = re.compile(
    r"^(torch|transformers|peft|accelerate|sentencepiece|safetensors|tokenizers|huggingface_hub|hf_xet|triton)"
    r"([-_.].*)?$|^(nvidia|cuda)[-_]",
    re.I,
)


@pytest.fixture(scope="module")
def light(tmp_path_factory, wheel):
    """`pipx install envbuild` without the workload extra: the wheel in a fresh venv that sees envbuild's own
    dependencies (this venv's, by links) and none of the workload's (no torch, no transformers). (envbuild, env,
    a folder outside the clone.)"""
    root = tmp_path_factory.mktemp("light")
    deps = root / "tool-deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not WORKLOAD_ONLY.match(entry.name) and not entry.name.startswith(("__editable__", "envbuild")):
            (deps / entry.name).symlink_to(entry)
    python, _ = _venv_with(root, wheel, deps)
    (python.parent / "uv").symlink_to(Path(sysconfig.get_paths()["scripts"]) / "uv")  # the uv wheel's binary
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ENVBUILD_HOME", "ENVBUILD_RECIPES")},
        "XDG_CACHE_HOME": str(root / "cache"),  # the managed environment, made under this test's folder
        "UV_CACHE_DIR": str(root / "uv-cache"),
        "UV_PYTHON_DOWNLOADS": "never",
        "ENVBUILD_TORCH_INDEX_URL": str(CPU_WHEEL.parent),  # a mirror of the CPU index: the file it serves
    }
    return python.parent / "envbuild", env, elsewhere


def test_a_tool_install_without_the_workload_extra_trains_in_a_managed_cpu_torch(light):
    """On this CPU-only machine, `run workload --local` from a light install makes envbuild's own environment: the
    CPU cell's torch (2.13.0+cpu, hash-checked against the recorded sha256) and its lock's stack, no CUDA package;
    the tool's own environment never gets torch. The next run takes the cached environment."""
    if not CPU_WHEEL.is_file():
        pytest.skip("no local copy of the CPU index's wheel (download.pytorch.org is not reachable from here)")
    exe, env, cwd = light
    assert subprocess.run([str(exe.parent / "python"), "-c", "import torch"], env=env, capture_output=True).returncode
    args = ["run", "workload", "--local", "--no-record", "--", "--max-steps", "4", "--min-accuracy", "0", "--no-probes"]
    first = _run(light, *args[:4], "--out", "first", *args[4:])
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "making the workload environment" in first.stderr and "cpu-torch2.13-py3.11" in first.stderr
    result = json.loads((cwd / "first" / "result.json").read_text())
    assert result["versions"]["torch"] == "2.13.0+cpu" and result["hardware"]["device_type"] == "cpu"
    block = result["environment"]
    assert (block["route"], block["cell"], block["lock"], block["from_mirror"]) == (
        "managed",
        "cpu-torch2.13-py3.11",
        "torch2.13-py3.11",
        True,
    )
    assert "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b" in block["torch_sha256"]
    [made] = (Path(env["XDG_CACHE_HOME"]) / "envbuild" / "workload-envs").glob("cpu-torch2.13-py3.11-*/")
    names = [d.name for d in made.glob("lib/python3*/site-packages/*.dist-info")]
    assert any(n.startswith("torch-2.13.0+cpu") for n in names)
    assert not [n for n in names if re.match(r"(nvidia|cuda|triton)", n, re.I)], names
    second = _run(light, *args[:4], "--data", str(cwd / "no-such.jsonl"))  # refused after the environment is found
    assert second.returncode == 2 and "(cached;" in second.stderr, second.stderr[-2000:]
