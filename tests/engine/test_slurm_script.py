"""Slurm without a cluster, from the site settings to the script that runs: site files and options at the
door, --config values, the tasks `plan` makes, job.sbatch as rendered for real settings and then run by a real
bash (stand-ins on PATH for `apptainer`, `hostname`, `sbatch` and `sacct` that record what they were given and
answer in the format .ci/hpc_cluster.sh's Slurm prints), so what is asserted is what a task runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from builder.engine.slurm import (
    STATE_CLASSES,
    Site,
    SlurmError,
    Task,
    checked_path,
    load_site,
    parse_configs,
    parse_sacct,
    plan,
    render_script,
    sacct,
    sbatch,
    site_file,
)
from builder.store.verdict_rules import counts
from builder.plan.cells import Cell
from tests.engine.test_slurm_injection import make_sif

ROCM = {"flavor": "rocm", "accel_version": "6.4", "torch": "2.13", "arch": "gfx90a", "python": "3.11"}
SUB_ID, CREATED = "0123456789ab", "2026-12-04T00:00:00Z"
#: A stand-in that writes its argv (NUL-separated; sbatch: also its standard input) into $RECORD_DIR, then
#: answers $REPLY_TEXT on stdout, $REPLY_ERR on stderr and exits $REPLY_CODE.
RECORDER = """#!/bin/bash
if [ "$1" = --version ]; then echo "${VERSION_LINE:-$(basename "$0") version 1.4.5}"; exit 0; fi
printf '%s\\0' "$@" > "$RECORD_DIR/$(basename "$0").argv"
[ "$(basename "$0")" != sbatch ] || cat > "$RECORD_DIR/sbatch.stdin"
printf '%s' "${REPLY_TEXT:-}"
echo "${REPLY_ERR:-}" >&2
exit "${REPLY_CODE:-0}"
"""


def stand_ins(where: Path, *names: str) -> tuple[Path, Path]:
    """(bin dir, record dir) with a recording stand-in for each of `names`."""
    bin_dir, record = where / "bin", where / "record"
    bin_dir.mkdir(parents=True, exist_ok=True)
    record.mkdir(exist_ok=True)
    for name in names:
        (bin_dir / name).write_text(RECORDER)
        (bin_dir / name).chmod(0o755)
    return bin_dir, record


def argv_of(record: Path, name: str) -> list[str]:
    return (record / f"{name}.argv").read_bytes().decode().split("\0")[:-1]


# --- site settings -----------------------------------------------------------------------------------------


def test_the_site_file_is_found_under_xdg_config_home_else_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert site_file() == tmp_path / "xdg" / "envbuild" / "site.toml"
    assert site_file(tmp_path / "given") == tmp_path / "given" / "envbuild" / "site.toml"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert site_file() == tmp_path / "home" / ".config" / "envbuild" / "site.toml"


def test_load_site_reads_the_default_site_file_and_options_override_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "envbuild").mkdir()
    (tmp_path / "envbuild" / "site.toml").write_text(
        '[slurm]\npartition = "small-g"\naccount = "project_1"\nmodules = ["LUMI/24.03"]\ncpus_per_task = 7\n'
    )
    site = load_site({"account": "project_2", "mem": None, "modules": [], "gpus": (), "time": "00:05:00"})
    assert (site.partition, site.account, site.modules, site.cpus_per_task, site.time, site.gpus, site.mem) == (
        "small-g",
        "project_2",
        ["LUMI/24.03"],
        7,
        "00:05:00",
        None,
        None,
    )


def test_without_a_site_file_the_options_and_defaults_hold(tmp_path):
    site = load_site({"partition": "debug"}, tmp_path / "missing.toml")
    assert (site.partition, site.time, site.modules, site.results_dir) == ("debug", "01:00:00", [], None)
    (tmp_path / "other.toml").write_text("[build]\nx = 1\n")  # a site file without a [slurm] table
    assert load_site({}, tmp_path / "other.toml").time == "01:00:00"


@pytest.mark.parametrize(
    "text, words",
    [
        ("[slurm\npartition = 1", "not valid TOML"),
        (b'[slurm]\npartition = "\xff"\n', "not valid TOML"),
        ('slurm = "small-g"\n', "[slurm] must be a table"),
        ('[slurm]\npartition = "a b"\n', "site setting partition: Value error, 'a b' is not a plain Slurm value"),
        ("[slurm]\ncpus_per_task = 0\n", "site setting cpus_per_task: Input should be greater than or equal to 1"),
        ("[slurm]\ncpus_per_task = 1025\n", "site setting cpus_per_task: Input should be less than or equal to 1024"),
        ('[slurm]\nmodules = ["ok", "not ok"]\n', "site setting modules: Value error, 'not ok'"),
    ],
)
def test_a_bad_site_file_is_refused_naming_the_file(tmp_path, text, words):
    path = tmp_path / "site.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SlurmError) as refused:
        load_site({}, path)
    assert words in str(refused.value) and str(path) in str(refused.value)


def test_a_bad_site_file_value_is_refused_even_where_an_option_overrides_it(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text('[slurm]\npartition = "x;id"\n')
    with pytest.raises(SlurmError, match="site setting partition"):
        load_site({"partition": "debug"}, path)


def test_cpus_per_task_takes_1_to_1024(tmp_path):
    assert load_site({"cpus_per_task": 1}, tmp_path / "none.toml").cpus_per_task == 1
    assert load_site({"cpus_per_task": 1024}, tmp_path / "none.toml").cpus_per_task == 1024


# --- paths and --config ------------------------------------------------------------------------------------


def test_checked_path_makes_paths_absolute_and_refuses_climbing_or_empty(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert checked_path("rel/x", "results_dir") == tmp_path / "rel" / "x"
    assert checked_path(Path("/scratch/a/..b"), "results_dir") == Path("/scratch/a/..b")
    for bad in ("", "/scratch/a/../b", "/scratch/a/..", "/scratch/a b", "/scratch/a:b"):
        with pytest.raises(SlurmError) as refused:
            checked_path(bad, "task directory")
        assert str(refused.value).startswith(f"task directory {bad!r}: a path here may hold only")


def test_configs_are_split_like_a_shell_and_checked():
    assert parse_configs(()) == {"default": []}
    assert parse_configs(("smoke=--max-steps 4 --data 'my file.jsonl'", "b=", "c=--output x")) == {
        "smoke": ["--max-steps", "4", "--data", "my file.jsonl"],
        "b": [],
        "c": ["--output", "x"],
    }
    for value, words in (
        ("smoke", "use NAME=WORKLOAD-ARGS"),
        ("Smoke=--seed 1", "use NAME=WORKLOAD-ARGS"),
        ("a=--data 'x", "No closing quotation"),
        ("a=--out /x", "--out is set per task"),
        ("a=--seed 1 --out=/x", "--out is set per task"),
    ):
        with pytest.raises(SlurmError, match=words):
            parse_configs((value,))
    with pytest.raises(SlurmError, match="--config a is given twice"):
        parse_configs(("a=--seed 1", "a=--seed 2"))


# --- plan ----------------------------------------------------------------------------------------------------


def test_plan_makes_a_task_per_sif_and_configuration_in_order(tmp_path):
    cpu = make_sif(tmp_path / "cpu")
    rocm = make_sif(tmp_path / "rocm", cell_key=Cell(**ROCM).key, cell=ROCM)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    sub = plan(SUB_ID, [cpu, rocm], {"a": ["--seed", "1"], "b": []}, Site(results_dir=tmp_path / "link"), CREATED)
    assert sub.results_dir == tmp_path / "real" / SUB_ID  # the shared directory as the nodes see it
    assert [(t.index, t.cell, t.config, t.flavor, t.sif.parent.name) for t in sub.tasks] == [
        (0, "cpu-torch2.13-py3.11", "a", "cpu", "cpu"),
        (1, "cpu-torch2.13-py3.11", "b", "cpu", "cpu"),
        (2, "rocm6.4-torch2.13-gfx90a-py3.11", "a", "rocm", "rocm"),
        (3, "rocm6.4-torch2.13-gfx90a-py3.11", "b", "rocm", "rocm"),
    ]
    assert [t.out_dir.name for t in sub.tasks] == [
        "0-cpu-torch2.13-py3.11-a",
        "1-cpu-torch2.13-py3.11-b",
        "2-rocm6.4-torch2.13-gfx90a-py3.11-a",
        "3-rocm6.4-torch2.13-gfx90a-py3.11-b",
    ]
    assert {t.out_dir.parent for t in sub.tasks} == {sub.results_dir}
    records = {p: json.loads(p.with_name("cell.sif.json").read_text()) for p in (cpu, rocm)}
    assert sub.images == {r["sha256"]: r["image"] for r in records.values()}
    assert [t.sif_sha256 for t in sub.tasks] == [records[cpu]["sha256"]] * 2 + [records[rocm]["sha256"]] * 2
    assert sub.tasks[0].args == ["--seed", "1"] and sub.schema_version == 1 and sub.created_at == CREATED


def test_plan_refusals_say_what_to_do(tmp_path):
    sif = make_sif(tmp_path / "sif")
    with pytest.raises(SlurmError, match="no results directory: pass --results-dir"):
        plan(SUB_ID, [sif], {"a": []}, Site(), CREATED)
    with pytest.raises(SlurmError, match="no tasks: pass at least one --sif"):
        plan(SUB_ID, [], {"a": []}, Site(results_dir=tmp_path), CREATED)
    with pytest.raises(SlurmError, match="no such SIF file"):
        plan(SUB_ID, [tmp_path / "missing.sif"], {"a": []}, Site(results_dir=tmp_path), CREATED)
    with pytest.raises(SlurmError) as refused:
        plan(SUB_ID, [sif], {"a": ["x\x00y"]}, Site(results_dir=tmp_path), CREATED)
    assert str(refused.value) == f"{sif}: Value error, a workload argument holds a NUL byte"
    sif.write_bytes(b"changed")
    with pytest.raises(SlurmError, match="its sha256 differs"):
        plan(SUB_ID, [sif], {"a": []}, Site(results_dir=tmp_path), CREATED)


@pytest.mark.parametrize(
    "cell, words",
    [
        ({**ROCM, "arch": "gfx90a;id"}, "names no valid cell (Value error"),  # one pydantic error: its message
        ({"flavor": "cpu", "torch": "2.13", "python": "3.11", "colour": "red"}, "names no valid cell ("),
    ],
)
def test_a_record_whose_coordinates_are_no_cell_is_refused(tmp_path, cell, words):
    sif = make_sif(tmp_path / "sif", cell_key=Cell(**ROCM).key, cell=cell)
    with pytest.raises(SlurmError) as refused:
        plan(SUB_ID, [sif], {"a": []}, Site(results_dir=tmp_path), CREATED)
    assert words in str(refused.value) and "make the SIF again with `envbuild sif`" in str(refused.value)


def test_a_record_without_coordinates_is_planned_by_its_cell_key(tmp_path):
    sif = make_sif(tmp_path / "sif")
    record = json.loads(sif.with_name("cell.sif.json").read_text())
    del record["image"]["manifest"]["cell"]
    sif.with_name("cell.sif.json").write_text(json.dumps(record))
    sub = plan(SUB_ID, [sif], {"a": []}, Site(results_dir=tmp_path), CREATED)
    assert sub.tasks[0].cell == "cpu-torch2.13-py3.11"


def test_a_task_index_is_never_negative(tmp_path):
    fields = dict(
        cell="cpu-torch2.13-py3.11",
        config="a",
        sif=tmp_path / "x.sif",
        sif_sha256="0" * 64,
        flavor="cpu",
        args=[],
        out_dir=tmp_path / "t",
    )
    assert Task(index=0, **fields).index == 0
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        Task(index=-1, **fields)


# --- the script ----------------------------------------------------------------------------------------------


def full_site(results: Path) -> Site:
    return Site(
        partition="small-g",
        account="project_465000001",
        time="00:20:00",
        gpus="1",
        gres="gpu:mi250:1",
        cpus_per_task=7,
        mem="16G",
        modules=["LUMI/24.03", "partition/G"],
        results_dir=results,
    )


def test_the_script_header_carries_every_site_setting(tmp_path):
    sub = plan(SUB_ID, [make_sif(tmp_path / "sif")], {"a": [], "b": [], "c": []}, full_site(tmp_path), CREATED)
    script = render_script(sub)
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert [line for line in lines if line.startswith("#SBATCH")] == [
        f"#SBATCH --job-name=envbuild-{SUB_ID}",
        "#SBATCH --array=0-2",
        "#SBATCH --time=00:20:00",
        f"#SBATCH --output={tmp_path}/slurm-{SUB_ID}-%A_%a.out",
        "#SBATCH --partition=small-g",
        "#SBATCH --account=project_465000001",
        "#SBATCH --gpus=1",
        "#SBATCH --gres=gpu:mi250:1",
        "#SBATCH --cpus-per-task=7",
        "#SBATCH --mem=16G",
    ]
    assert [line for line in lines if line.startswith("module ")] == [
        "module load LUMI/24.03",
        "module load partition/G",
    ]
    assert f"{len(sub.tasks)} task(s)" in lines[1]
    assert "#SBATCH --array=1,2" in render_script(sub, "1,2").splitlines()
    bare = render_script(
        plan(SUB_ID, [make_sif(tmp_path / "sif")], {"a": []}, Site(results_dir=tmp_path), CREATED)
    ).splitlines()
    assert [line.split("=")[0] for line in bare if line.startswith("#SBATCH")] == [
        "#SBATCH --job-name",
        "#SBATCH --array",
        "#SBATCH --time",
        "#SBATCH --output",
    ]
    assert "#SBATCH --array=0-0" in bare and not any(line.startswith("module ") for line in bare)
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def run_task(script: str, where: Path, task: str, job: str | None = "55", code: int = 0):
    """Run the sbatch script with a real bash as array task `task` of job `job`, apptainer and hostname stood in."""
    bin_dir, record = stand_ins(where, "apptainer", "module")
    (bin_dir / "hostname").write_text("#!/bin/sh\necho hpc-node0\n")
    (bin_dir / "hostname").chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_ARRAY_TASK_ID": task,
        "RECORD_DIR": str(record),
        "HOME": str(where),
        "REPLY_TEXT": "[workload] training\n",
        "REPLY_ERR": "a warning on stderr",
        "REPLY_CODE": str(code),
        **({"SLURM_ARRAY_JOB_ID": job} if job else {}),
    }
    (where / "job.sbatch").write_text(script)
    proc = subprocess.run(
        ["bash", str(where / "job.sbatch")],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    return proc, record


def test_each_array_task_runs_its_own_cell_and_configuration(tmp_path):
    cpu = make_sif(tmp_path / "cpu")
    rocm = make_sif(tmp_path / "rocm", cell_key=Cell(**ROCM).key, cell=ROCM)
    sub = plan(
        SUB_ID,
        [cpu, rocm],
        {"a": ["--seed", "1"], "b": ["--max-steps", "4"]},
        Site(results_dir=tmp_path / "results"),
        CREATED,
    )
    script = render_script(sub)
    proc, record = run_task(script, tmp_path / "run3", "3")
    assert proc.returncode == 0, proc.stderr
    task = sub.tasks[3]
    assert argv_of(record, "apptainer") == [
        "exec",
        "--cleanenv",
        "--containall",
        "--pwd",
        "/tmp",
        "--rocm",
        "--env",
        "PYTHONUNBUFFERED=1",
        "--env",
        "HOME=/tmp",
        "--bind",
        f"{task.out_dir}:/out",
        str(rocm.resolve()),
        "python3",
        "-m",
        "workload",
        "train",
        "--out",
        "/out",
        "--max-steps",
        "4",
    ]
    assert (task.out_dir / "container.log").read_text() == (
        "# envbuild: task 3 of job 55 on hpc-node0\n# envbuild: runtime: apptainer version 1.4.5\n"
        "[workload] training\na warning on stderr\n"
    )
    assert not sub.tasks[0].out_dir.exists()
    proc, record = run_task(script, tmp_path / "run0", "0", job=None)
    assert proc.returncode == 0, proc.stderr
    assert argv_of(record, "apptainer")[5:7] == ["--env", "PYTHONUNBUFFERED=1"]  # cpu: no GPU option
    assert argv_of(record, "apptainer")[-3:] == ["/out", "--seed", "1"]
    assert (sub.tasks[0].out_dir / "container.log").read_text().startswith("# envbuild: task 0 of job ? on hpc-node0\n")


def test_a_task_that_fails_fails_the_array_task_and_an_unknown_index_runs_nothing(tmp_path):
    sub = plan(SUB_ID, [make_sif(tmp_path / "sif")], {"a": []}, Site(results_dir=tmp_path / "results"), CREATED)
    script = render_script(sub)
    proc, _ = run_task(script, tmp_path / "fails", "0", code=3)
    assert proc.returncode == 3  # the workload's exit code is the task's: sacct reports FAILED 3:0
    proc, record = run_task(script, tmp_path / "unknown", "1")
    assert proc.returncode == 2 and "envbuild: no task 1 in this submission" in proc.stderr
    assert not (record / "apptainer.argv").exists()


# --- sbatch and sacct ----------------------------------------------------------------------------------------


def test_sbatch_gets_the_script_on_stdin_and_answers_the_job_id(tmp_path, monkeypatch):
    bin_dir, record = stand_ins(tmp_path, "sbatch")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("RECORD_DIR", str(record))
    monkeypatch.setenv("REPLY_TEXT", "4242;cluster\n")
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\necho task\n")
    assert sbatch(script, None) == "4242"
    assert argv_of(record, "sbatch") == ["--parsable"]
    assert (record / "sbatch.stdin").read_text() == script.read_text()
    assert sbatch(script, "1,3") == "4242"
    assert argv_of(record, "sbatch") == ["--parsable", "--array=1,3"]


@pytest.mark.parametrize(
    "reply, code, words",
    [
        ("Submitted batch job 12\n", 0, "sbatch answered 'Submitted batch job 12', not a job id"),
        ("", 1, "sbatch --parsable failed (exit code 1): sbatch: error: invalid partition specified: x"),
    ],
)
def test_sbatch_refusals_are_slurm_errors(tmp_path, monkeypatch, reply, code, words):
    bin_dir, record = stand_ins(tmp_path, "sbatch")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("RECORD_DIR", str(record))
    monkeypatch.setenv("REPLY_TEXT", reply)
    monkeypatch.setenv("REPLY_CODE", str(code))
    monkeypatch.setenv("REPLY_ERR", "sbatch: error: invalid partition specified: x")
    (tmp_path / "job.sbatch").write_text("#!/bin/bash\n")
    with pytest.raises(SlurmError) as refused:
        sbatch(tmp_path / "job.sbatch", None)
    assert str(refused.value) == words


def test_a_missing_sbatch_names_the_login_node(tmp_path):
    (tmp_path / "job.sbatch").write_text("#!/bin/bash\n")
    with pytest.raises(SlurmError, match="not found: run this on a Slurm login node"):
        sbatch(tmp_path / "job.sbatch", None, str(tmp_path / "no-sbatch"))


def test_sacct_is_asked_for_one_jobs_tasks_and_its_answer_parsed(tmp_path, monkeypatch):
    bin_dir, record = stand_ins(tmp_path, "sacct")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("RECORD_DIR", str(record))
    monkeypatch.setenv("REPLY_TEXT", "123456789012_0|COMPLETED|0:0|2026-12-03T09:41:47|2026-12-03T09:42:22|n0\n")
    states = sacct("123456789012")
    assert argv_of(record, "sacct") == [
        "-j",
        "123456789012",
        "-X",
        "-n",
        "-P",
        "--format=JobID,State,ExitCode,Start,End,NodeList",
    ]
    assert states[0].state == "COMPLETED" and states[0].end == "2026-12-03T09:42:22Z"
    for bad in ("1234567890123", "12a", "", "1;id"):
        with pytest.raises(SlurmError, match="is not a Slurm job id"):
            sacct(bad)


def test_sacct_lines_of_other_jobs_blank_lines_and_unknown_times(tmp_path):
    text = (
        "\n"
        "7_2|RUNNING|0:0|2026-12-03T09:41:47|Unknown|\n"
        "8_0|FAILED|1:0|2026-12-03T09:41:47|2026-12-03T09:42:19|hpc-node0\n"
        "17_1|FAILED|1:0|2026-12-03T09:41:47|2026-12-03T09:42:19|hpc-node0\n"
        "7_10|CD|0:0|None|None|hpc-node1\n"
    )
    states = parse_sacct(text, "7")
    assert sorted(states) == [2, 10]
    assert (states[2].state, states[2].start, states[2].end, states[2].node) == (
        "RUNNING",
        "2026-12-03T09:41:47Z",
        None,
        None,
    )
    assert (states[10].index, states[10].state, states[10].start, states[10].node) == (10, "CD", None, "hpc-node1")
    assert parse_sacct("7_0|" + "A" * 20 + "|0:0|||\n", "7")[0].state == "A" * 20


@pytest.mark.parametrize("state", ["", "   ", "A", "A" * 21, "completed"])
def test_a_sacct_state_that_is_no_slurm_state_is_refused(state):
    with pytest.raises(SlurmError) as refused:
        parse_sacct(f"7_3|{state}|0:0|||\n", "7")
    assert str(refused.value) == f"sacct state {state!r} of task 7_3 is not a Slurm state"


def test_sacct_failing_is_a_slurm_error_with_its_message(tmp_path, monkeypatch):
    bin_dir, record = stand_ins(tmp_path, "sacct")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("RECORD_DIR", str(record))
    monkeypatch.setenv("REPLY_CODE", "1")
    tail = "sacct: error: Problem talking to the database"
    monkeypatch.setenv("REPLY_ERR", "x" * 900 + tail)
    with pytest.raises(SlurmError) as refused:
        sacct("7")
    assert str(refused.value) == "sacct -j failed (exit code 1): " + "x" * (800 - len(tail)) + tail  # the last 800


def test_the_end_state_table_says_what_the_verdict_rules_count():
    """STATE_CLASSES' second column (docs/matrix.md "Slurm end states") agrees with verdict_rules."""
    for state, (error_class, verdict) in STATE_CLASSES.items():
        assert counts("run", "error", error_class) is verdict, state


def test_a_refused_path_is_shown_cut_at_200_characters():
    value = "/scratch/" + "a" * 250 + " b"
    with pytest.raises(SlurmError) as refused:
        checked_path(value, "results_dir")
    assert str(refused.value).startswith(f"results_dir {value[:200]!r}: a path here")


def test_a_sacct_line_with_more_fields_is_refused():
    """A `|` inside a field (a node list or state Slurm did not print as expected) shifts every field after it."""
    with pytest.raises(SlurmError, match="does not have the fields JobID,State,ExitCode,Start,End,NodeList"):
        parse_sacct("7_0|COMPLETED|0:0|2026-12-03T09:41:47|2026-12-03T09:42:22|n0|extra\n", "7")


def test_sbatch_killed_by_a_signal_is_a_failure(tmp_path, monkeypatch):
    bin_dir, _ = stand_ins(tmp_path)
    (bin_dir / "sbatch").write_text("#!/bin/bash\necho 12\nkill -9 $$\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    (tmp_path / "job.sbatch").write_text("#!/bin/bash\n")
    with pytest.raises(SlurmError, match=r"^sbatch --parsable failed \(exit code -9\)"):
        sbatch(tmp_path / "job.sbatch", None)


def test_a_site_refusal_names_the_first_bad_setting(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text('[slurm]\npartition = "a b"\naccount = "c d"\n')
    with pytest.raises(SlurmError, match=r"^site setting partition: Value error, 'a b'"):
        load_site({}, path)


def test_a_task_refusal_names_its_first_problem(tmp_path):
    sif = make_sif(tmp_path / "sif")
    with pytest.raises(SlurmError) as refused:
        plan(SUB_ID, [sif], {"Bad Name": ["x\x00"]}, Site(results_dir=tmp_path), CREATED)
    assert str(refused.value).startswith(f"{sif}: String should match pattern")


def test_a_record_with_two_bad_coordinates_is_refused_by_the_first(tmp_path):
    cell = {**ROCM, "torch": "lizard", "python": "snake"}
    with pytest.raises(SlurmError) as refused:
        plan(
            SUB_ID,
            [make_sif(tmp_path / "sif", cell_key=Cell(**ROCM).key, cell=cell)],
            {"a": []},
            Site(results_dir=tmp_path),
            CREATED,
        )
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as direct:
        Cell(**cell)
    assert len(direct.value.errors()) == 2
    assert f"names no valid cell ({direct.value.errors()[0]['msg'][:300]})" in str(refused.value)


def test_a_long_cell_key_is_shown_cut_at_300_characters(tmp_path):
    key = "cpu-torch" + "9" * 400
    with pytest.raises(SlurmError) as refused:
        plan(SUB_ID, [make_sif(tmp_path / "sif", cell_key=key)], {"a": []}, Site(results_dir=tmp_path), CREATED)
    with pytest.raises(ValueError) as direct:
        Cell.from_key(key)
    assert f"names no valid cell ({str(direct.value)[:300]}); make" in str(refused.value)


def test_a_missing_command_is_named(tmp_path):
    (tmp_path / "job.sbatch").write_text("#!/bin/bash\n")
    with pytest.raises(SlurmError, match=rf"^{tmp_path}/no-sbatch not found"):
        sbatch(tmp_path / "job.sbatch", None, str(tmp_path / "no-sbatch"))


def test_a_node_with_only_singularityce_runs_the_task_with_it_and_says_so(tmp_path):
    sub = plan(SUB_ID, [make_sif(tmp_path / "sif")], {"a": []}, Site(results_dir=tmp_path / "results"), CREATED)
    where = tmp_path / "run"
    bin_dir, record = stand_ins(where, "singularity", "module")
    (bin_dir / "hostname").write_text("#!/bin/sh\necho hpc-node0\n")
    (bin_dir / "hostname").chmod(0o755)
    (where / "job.sbatch").write_text(render_script(sub))
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_ARRAY_TASK_ID": "0",
        "RECORD_DIR": str(record),
        "HOME": str(where),
        "VERSION_LINE": "singularity-ce version 4.1.0-jammy",
        "REPLY_TEXT": "[workload] pass\n",
    }
    proc = subprocess.run(
        ["bash", str(where / "job.sbatch")],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert argv_of(record, "singularity")[:3] == ["exec", "--cleanenv", "--containall"]
    assert (sub.tasks[0].out_dir / "container.log").read_text().splitlines()[1:] == [
        "# envbuild: runtime: singularity-ce version 4.1.0-jammy",
        "[workload] pass",
        "",
    ]


def test_a_node_without_a_runtime_fails_the_task_with_apptainers_fatal_line(tmp_path):
    sub = plan(SUB_ID, [make_sif(tmp_path / "sif")], {"a": []}, Site(results_dir=tmp_path / "results"), CREATED)
    script = render_script(sub).replace(
        "command -v apptainer || command -v singularity",
        "command -v no-apptainer-here || command -v no-singularity-here",
    )
    proc, record = run_task(script, tmp_path / "run", "0")  # /usr/bin may hold either on the machine running this
    assert proc.returncode == 255, proc.stderr
    assert not (record / "apptainer.argv").exists()
    assert (sub.tasks[0].out_dir / "container.log").read_text().splitlines()[1] == (
        "FATAL:   envbuild: no apptainer or singularity on this node's PATH (the site file's modules load one)"
    )
