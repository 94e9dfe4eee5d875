"""The step model (builder.plan.steps): every script is a step, every step's script exists, the manifest's
fetch steps and the context's scripts come from it, and a step added to it reaches both output formats."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from builder.paths import IMAGES_DIR
from builder.plan import steps
from builder.plan.context import build_args
from builder.plan.render import context_files
from builder.plan.resolve import Request, all_plans, resolve
from tests.render_fixtures import GOLDEN_CELLS, golden_static

COMMON = IMAGES_DIR / "common"
REPO = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def plans():
    return all_plans()


def test_every_common_file_is_some_steps_script_or_library_and_every_step_script_exists(plans):
    used = set().union(*(steps.scripts(plan) for plan in plans))
    on_disk = {p.name for p in COMMON.iterdir() if p.is_file()}
    assert used == on_disk, f"not a step: {sorted(on_disk - used)}; no such file: {sorted(used - on_disk)}"


def test_each_common_script_is_named_in_the_step_model_only():
    """No template and no other module of builder/ writes a script's file name: adding or renaming a step is
    one entry in builder/plan/steps.py."""
    texts = {p: p.read_text() for p in [*(REPO / "builder").rglob("*.py"), *(REPO / "images").glob("*.j2")]}
    for name in sorted(p.name for p in COMMON.iterdir()):
        naming = sorted(
            str(p.relative_to(REPO)) for p, text in texts.items() if re.search(rf"\b{re.escape(name)}\b", text)
        )
        assert naming == ["builder/plan/steps.py"], (name, naming)


def test_every_script_that_sources_the_library_finds_it_copied_in_its_chain(plans):
    """lib.sh comes with the first steps of the base stage: in each Apptainer stage (which runs the whole chain)
    it is copied at or before the first step whose script sources it."""
    sourcing = {
        p.name for p in COMMON.glob("*.sh") if re.search(rf"^\s*(source|\.)\s.*{steps.LIB}", p.read_text(), re.M)
    }
    assert len(sourcing) > 10
    for plan in plans:
        for sif in steps.sif_stages(plan):
            copied: set[str] = set()
            for step in sif.steps:
                copied |= {*step.libs, step.script}
                if step.script in sourcing:
                    assert steps.LIB in copied, (plan.cell.key, sif.name, step.script)


def test_every_argument_a_stage_or_step_reads_is_a_pin_and_every_pin_is_read(plans):
    for plan in plans:
        pins = build_args(plan)
        read = {a.name for s in steps.stages(plan) for a in s.args}
        read |= {name for step in steps.plan_steps(plan) for name in step.args}
        assert read <= set(pins), (plan.cell.key, sorted(read - set(pins)))
        assert set(pins) - read == {"BASE_IMAGE"}, (plan.cell.key, sorted(set(pins) - read))


def test_each_apptainer_stage_runs_its_dockerfile_chain_and_takes_what_it_binds(plans):
    for plan in plans:
        dockerfile = {s.name: s for s in steps.stages(plan)}
        sifs = steps.sif_stages(plan)
        assert [s.name for s in sifs][-1] == "runtime"
        for sif in sifs:
            assert sif.chain[0].base == steps.BASE_IMAGE and sif.chain[-1] == dockerfile[sif.name]
            assert all(later.base == earlier.name for earlier, later in zip(sif.chain, sif.chain[1:]))
            assert {b.stage for b in sif.binds} <= {s.name for s in sifs[: sifs.index(sif)]}


@pytest.mark.parametrize("name", sorted(GOLDEN_CELLS))
def test_the_manifests_fetch_steps_are_the_steps_the_model_marks_and_only_they_get_the_ca(name):
    plan = resolve(GOLDEN_CELLS[name])
    files, manifest = context_files(plan, golden_static())
    marked = {step.script: step.fetches for step in steps.plan_steps(plan) if step.fetches}
    assert manifest["fetch_steps"] == marked and marked
    runs = [s for s in re.split(r"\n(?=[A-Z]+ )", files["Dockerfile"].decode()) if s.startswith("RUN ")]
    with_ca = {re.search(r"/([\w.]+\.(?:sh|py))", run).group(1) for run in runs if "id=envbuild_ca" in run}
    assert with_ca == set(marked)
    assert {p.removeprefix("common/") for p in files if p.startswith("common/")} == steps.scripts(plan)


def _stage_text(text: str, name: str) -> str:
    """One stage of a rendered Dockerfile or cell.def: from its `# --- name:` header to the next one."""
    start = text.index(f"# --- {name}:")
    end = text.find("\n# --- ", start)
    return text[start:] if end == -1 else text[start:end]


def test_a_step_added_to_the_model_appears_in_both_formats_and_the_context(monkeypatch):
    """One new entry in the model (here: the build-tools step, a second time, in the sentencepiece stage of a
    wheel cell, which otherwise has no such step) is copied and run by the Dockerfile and by cell.def, with its
    argument declared/exported before it, its argv quoted, and its script in the context and the fetch steps."""
    plan = resolve(Request(flavor="cpu", torch="2.13"))
    before, _ = context_files(plan, golden_static())
    assert "common/install_build_tools.sh" not in before
    added = steps.Step(
        "install_build_tools.sh", argv=("a b",), args=("TORCH_VERSION",), wheelhouse=True, fetches="test tools"
    )
    original = steps._STAGES["sentencepiece"]

    def with_step(plan):
        stage = original(plan)
        return steps.Stage(stage.name, stage.base, stage.comment, stage.args, stage.steps + (added,))

    monkeypatch.setitem(steps._STAGES, "sentencepiece", with_step)
    files, manifest = context_files(plan, golden_static())
    dockerfile = _stage_text(files["Dockerfile"].decode(), "sentencepiece")
    definition = _stage_text(files["cell.def"].decode(), "sentencepiece")
    run = "bash /opt/envbuild/common/install_build_tools.sh 'a b'"
    assert re.search(
        r"ARG TORCH_VERSION\nCOPY common/install_build_tools.sh /opt/envbuild/common/\n"
        r"RUN --mount=type=secret,id=envbuild_ca,required=false \\\n"
        r"    --mount=type=bind,source=wheelhouse,target=/wheelhouse \\\n    " + re.escape(run) + "\n",
        dockerfile,
    ), dockerfile
    assert "    common/install_build_tools.sh /opt/envbuild/common/install_build_tools.sh\n" in definition
    export = definition.index("    export TORCH_VERSION=2.13.0+cpu\n")
    assert export < definition.index(f"    {run}\n") and definition.index("build_sentencepiece.sh\n") < export
    assert (
        "common/install_build_tools.sh" in files and manifest["fetch_steps"]["install_build_tools.sh"] == "test tools"
    )
    assert "install_build_tools.sh" not in _stage_text(files["cell.def"].decode(), "runtime")
