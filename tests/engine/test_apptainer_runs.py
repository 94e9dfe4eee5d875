"""`run workload --apptainer` and the SIF record without Apptainer: $ENVBUILD_APPTAINER is a stand-in script that
answers `--version` as Apptainer 1.3 prints it, records the argv it was given and behaves like the container it
would run (writes the workload's recorded result.json into the /out bind, or dies the ways a container dies, or
prints Apptainer's own FATAL line). What is asserted is what a user sees: the exit code, the message, the
result.json and container.log, and the command line Apptainer received. tests/integration/test_hpc.py runs the real thing."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.engine.apptainer import exit_failure, read_sidecar, runtime_record, verify_in_sif
from builder.engine.container import RunError
from builder.plan.cells import Cell
from repo import REPO_ROOT
from tests.engine.test_slurm_injection import make_sif

RECORDED = REPO_ROOT / "results" / "cpu-torch2.13-py3.11" / "container-smoke" / "result.json"
ROCM = {"flavor": "rocm", "accel_version": "6.4", "torch": "2.13", "arch": "gfx90a", "python": "3.11"}
CUDA = {"flavor": "cuda", "accel_version": "13.0", "torch": "2.11", "arch": "sm_90", "python": "3.12"}
#: The stand-in: $MODE says what the "container" does; the argv goes to $RECORD_DIR/apptainer.argv.
STAND_IN = """#!/bin/bash
if [ "$1" = --version ]; then
  echo "${VERSION_LINE-apptainer version 1.3.4}"; [ -n "$VERSION_KILL" ] && kill -9 $$; exit "${VERSION_CODE:-0}"
fi
printf '%s\\0' "$@" > "$RECORD_DIR/apptainer.argv"
for word in "$@"; do case "$word" in *:/out) out=${word%:/out} ;; esac; done
case "$MODE" in
  pass) echo "[workload] training"; cp "$RESULT" "$out/result.json"; echo "[workload] pass" ;;
  fatal) echo "INFO:    Converting SIF file to temporary sandbox..."
         echo "FATAL:   container creation failed: mount /proc/self/fd/3->/var/lib/apptainer: permission denied"
         exit 255 ;;
  badinput) echo "[workload] bad input: --data /data/x.jsonl: line 3 is not JSON"; exit "${EXIT_CODE:-2}" ;;
  usage) echo "usage: python -m workload train [-h]"; echo "error: unrecognized arguments: --bogus"; exit 2 ;;
  died) echo "[workload] training"; exit 137 ;;
  slow) echo "[workload] step 1"; for _ in $(seq 600); do [ -e "$GO" ] && break; sleep 0.1; done
        cp "$RESULT" "$out/result.json"; echo "[workload] pass" ;;
  verify) [ -n "$VERIFY_NOISE" ] && { head -c "$VERIFY_NOISE" /dev/zero | tr '\\0' x; echo END; }
          printf '{"ok": %s, "checks": [{"name": "torch"}, {"name": "rocm"}]}' "$VERIFY_OK" \\
            > "${out:-$(printf '%s\\n' "$@" | sed -n 's|:/out$||p')}/verify.json"
          [ -n "$VERIFY_KILL" ] && kill -9 $$; exit "${VERIFY_CODE:-0}" ;;
esac
"""


@pytest.fixture
def apptainer(tmp_path, monkeypatch) -> Path:
    """The stand-in as $ENVBUILD_APPTAINER; returns the folder its argv is recorded in."""
    record = tmp_path / "record"
    record.mkdir()
    (tmp_path / "bin").mkdir()
    binary = tmp_path / "bin" / "apptainer"
    binary.write_text(STAND_IN)
    binary.chmod(0o755)
    (tmp_path / "own.json").write_text(
        json.dumps({k: v for k, v in json.loads(RECORDED.read_text()).items() if k not in ("host", "image")})
    )
    monkeypatch.setenv("ENVBUILD_APPTAINER", str(binary))
    monkeypatch.setenv("RECORD_DIR", str(record))
    monkeypatch.setenv("RESULT", str(tmp_path / "own.json"))
    return record


def argv(record: Path) -> list[str]:
    return (record / "apptainer.argv").read_bytes().decode().split("\0")[:-1]


def run(tmp_path: Path, mode: str, monkeypatch, *args: str, sif: Path | None = None):
    monkeypatch.setenv("MODE", mode)
    sif = sif or make_sif(tmp_path / "sif")
    return CliRunner().invoke(
        main,
        ["run", "workload", "--apptainer", str(sif), "--out", str(tmp_path / "out"), "--no-record", *args],
        env={"COLUMNS": "300"},
    )


def test_a_run_passes_with_a_clean_contained_apptainer_exec(tmp_path, monkeypatch, apptainer):
    ran = run(tmp_path, "pass", monkeypatch, "--", "--max-steps", "4")
    assert ran.exit_code == 0, ran.output
    sif = (tmp_path / "sif" / "cell.sif").resolve()
    out = (tmp_path / "out").resolve()
    assert argv(apptainer) == [
        "exec",
        "--cleanenv",
        "--containall",
        "--pwd",
        "/tmp",
        "--env",
        "PYTHONUNBUFFERED=1",
        "--env",
        "HOME=/tmp",
        "--bind",
        f"{out}:/out",
        str(sif),
        "python3",
        "-m",
        "workload",
        "train",
        "--preset",
        "smoke",
        "--out",
        "/out",
        "--max-steps",
        "4",
    ]
    assert "running cell.sif (cpu) with apptainer: exec --cleanenv" in ran.output
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "pass" and result["image"]["environment"] == "apptainer"
    record = json.loads((tmp_path / "sif" / "cell.sif.json").read_text())
    assert result["image"]["sif"] == {"path": str(sif), "sha256": record["sha256"], "route": None}
    assert result["image"]["manifest"] == record["image"]["manifest"]
    assert result["image"]["runtime"] == {
        "name": "apptainer",
        "version": "1.3.4",
        "version_line": "apptainer version 1.3.4",
        "path": str(tmp_path / "bin" / "apptainer"),
    }
    assert (out / "container.log").read_text() == "[workload] training\n[workload] pass\n"
    assert "[workload] pass" in ran.output


@pytest.mark.parametrize(
    "cell, gpus, options",
    [
        (ROCM, None, ["--rocm"]),
        (ROCM, "all", ["--rocm"]),
        (
            ROCM,
            "0,1",
            ["--rocm", "--env", "PYTHONUNBUFFERED=1", "--env", "HOME=/tmp", "--env", "ROCR_VISIBLE_DEVICES=0,1"],
        ),
        (CUDA, "3", ["--nv", "--env", "PYTHONUNBUFFERED=1", "--env", "HOME=/tmp", "--env", "CUDA_VISIBLE_DEVICES=3"]),
        (CUDA, "all", ["--nv"]),
    ],
)
def test_the_gpus_of_the_sifs_flavor_reach_apptainer(tmp_path, monkeypatch, apptainer, cell, gpus, options):
    sif = make_sif(tmp_path / "sif", cell_key=Cell(**cell).key, cell=cell)
    ran = run(tmp_path, "pass", monkeypatch, *(["--gpus", gpus] if gpus else []), sif=sif)
    assert ran.exit_code == 0, ran.output
    given = argv(apptainer)
    assert given[5 : 5 + len(options)] == options
    assert sum(a.endswith("VISIBLE_DEVICES=" + (gpus or "")) for a in given) == (gpus not in (None, "all"))


def test_gpus_for_a_cpu_sif_are_bad_input(tmp_path, monkeypatch, apptainer):
    ran = run(tmp_path, "pass", monkeypatch, "--gpus", "0")
    assert ran.exit_code == 2 and "--gpus 0: the SIF holds a cpu image; it runs without GPUs" in ran.output
    assert not (apptainer / "apptainer.argv").exists() and not (tmp_path / "out").exists()
    ran = run(tmp_path, "pass", monkeypatch, "--gpus", "all")
    assert ran.exit_code == 2 and "--gpus all: the SIF holds a cpu image" in ran.output


def test_data_and_model_are_bound_read_only_and_named_inside(tmp_path, monkeypatch, apptainer):
    data_dir, data_file, model = tmp_path / "data", tmp_path / "d" / "mine.jsonl", tmp_path / "model"
    data_dir.mkdir()
    data_file.parent.mkdir()
    data_file.write_text('{"text": "a", "label": "joy"}\n')
    model.mkdir()
    ran = run(tmp_path, "pass", monkeypatch, "--data", str(data_dir), "--model", str(model))
    assert ran.exit_code == 0, ran.output
    given = argv(apptainer)
    binds = [given[i + 1] for i, a in enumerate(given) if a == "--bind"]
    assert binds[1:] == [f"{model.resolve()}:/model:ro", f"{data_dir.resolve()}:/data:ro"]
    assert given[-4:] == ["--model", "/model", "--data", "/data"]
    (tmp_path / "out" / "result.json").unlink()
    ran = run(tmp_path, "pass", monkeypatch, "--data", str(data_file), "--model", "google/gemma-2b")
    assert ran.exit_code == 0, ran.output
    given = argv(apptainer)
    assert [given[i + 1] for i, a in enumerate(given) if a == "--bind"][1:] == [
        f"{data_file.resolve()}:/data/mine.jsonl:ro"
    ]
    assert given[-4:] == ["--model", "google/gemma-2b", "--data", "/data/mine.jsonl"]


@pytest.mark.parametrize(
    "mode, code, error_class, words",
    [
        (
            "fatal",
            1,
            "container_error",
            "apptainer could not run the SIF (FATAL:   container creation failed: mount "
            "/proc/self/fd/3->/var/lib/apptainer: permission denied)",
        ),
        ("usage", 1, "usage_error", "the workload refused its arguments (exit code 2; see container.log)"),
        ("died", 1, "container_died", "apptainer exec exited with code 137"),
    ],
)
def test_how_the_container_ended_names_the_error(tmp_path, monkeypatch, apptainer, mode, code, error_class, words):
    ran = run(tmp_path, mode, monkeypatch)
    assert ran.exit_code == code, ran.output
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert (result["status"], result["error_class"]) == ("error", error_class)
    assert result["error"].startswith(words)


def test_the_workloads_bad_input_line_is_bad_input_and_writes_no_result(tmp_path, monkeypatch, apptainer):
    ran = run(tmp_path, "badinput", monkeypatch)
    assert ran.exit_code == 2, ran.output
    assert "--data /data/x.jsonl: line 3 is not JSON (no result written, nothing recorded)" in ran.output
    assert not (tmp_path / "out" / "result.json").exists()


@pytest.mark.parametrize(
    "code, log, expected",
    [
        (
            255,
            "INFO: x\nFATAL: first\nFATAL:   last one \n",
            ("container_error", "apptainer could not run the SIF (FATAL:   last one)"),
        ),
        (255, "[workload] training\nFATAL: out of memory\n", ("container_died", "apptainer exec exited with code 255")),
        (255, "no fatal line\n", ("container_died", "apptainer exec exited with code 255")),
        (254, "FATAL: x\n", ("container_died", "apptainer exec exited with code 254")),
        (2, "FATAL: x\n", ("usage_error", "the workload refused its arguments (exit code 2; see container.log)")),
        (1, "", ("container_died", "apptainer exec exited with code 1")),
    ],
)
def test_exit_codes_of_apptainer_exec(code, log, expected):
    assert exit_failure(code, log) == expected


@pytest.mark.parametrize(
    "line, name, version",
    [
        ("apptainer version 1.3.4", "apptainer", "1.3.4"),
        ("singularity-ce version 4.1.0-jammy", "singularity-ce", "4.1.0-jammy"),
        ("singularity version 3.8.7-1.el8", "singularity", "3.8.7-1.el8"),
        ("podman version 4.9.3", None, None),
    ],
)
def test_the_runtime_is_named_by_its_version_line(tmp_path, monkeypatch, apptainer, line, name, version):
    monkeypatch.setenv("VERSION_LINE", line)
    binary = str(tmp_path / "bin" / "apptainer")
    assert runtime_record(binary) == {"name": name, "version": version, "version_line": line, "path": binary}


def test_a_runtime_whose_version_fails_has_no_line(tmp_path, monkeypatch, apptainer):
    monkeypatch.setenv("VERSION_CODE", "1")
    binary = str(tmp_path / "bin" / "apptainer")
    assert runtime_record(binary) == {"name": None, "version": None, "version_line": None, "path": binary}
    monkeypatch.setenv("VERSION_CODE", "0")
    monkeypatch.setenv("VERSION_LINE", "")
    assert runtime_record(binary)["version_line"] is None


@pytest.mark.parametrize(
    "ok, code, expected_ok", [("true", 0, True), ("false", 0, False), ("true", 1, False), ('"yes"', 0, False)]
)
def test_verify_in_sif_runs_the_images_own_check_and_reads_its_report(
    tmp_path, monkeypatch, apptainer, ok, code, expected_ok
):
    monkeypatch.setenv("MODE", "verify")
    monkeypatch.setenv("VERIFY_OK", ok)
    monkeypatch.setenv("VERIFY_CODE", str(code))
    (tmp_path / "work").mkdir()
    outcome = verify_in_sif(str(tmp_path / "bin" / "apptainer"), tmp_path / "x.sif", tmp_path / "work")
    assert (outcome["ok"], outcome["exit_code"], outcome["checks"]) == (expected_ok, code, 2)
    assert argv(apptainer) == [
        "exec",
        "--cleanenv",
        "--containall",
        "--bind",
        f"{tmp_path / 'work' / 'verify'}:/out",
        str(tmp_path / "x.sif"),
        "python3",
        "/opt/envbuild/verify_image.py",
        "/opt/envbuild/expect.json",
        "/out/verify.json",
    ]
    assert (tmp_path / "work" / "verify").stat().st_mode & 0o777 == 0o777  # whoever apptainer runs as writes it


def test_verify_without_a_report_fails_with_the_output_tail(tmp_path, monkeypatch, apptainer):
    monkeypatch.setenv("MODE", "died")
    (tmp_path / "work").mkdir()
    outcome = verify_in_sif(str(tmp_path / "bin" / "apptainer"), tmp_path / "x.sif", tmp_path / "work")
    assert outcome == {"ok": False, "exit_code": 137, "checks": 0, "output_tail": "[workload] training\n"}


def test_the_sif_record_is_checked_before_it_is_used(tmp_path):
    sif = make_sif(tmp_path / "sif")
    assert read_sidecar(sif)["image"]["manifest"]["cell_key"] == "cpu-torch2.13-py3.11"
    side = sif.with_name("cell.sif.json")
    record = json.loads(side.read_text())
    for broken, words in (
        (json.dumps({**record, "image": {"tag": "x"}}), "is not a SIF record of `envbuild sif`"),
        (json.dumps({**record, "sha256": None}), "is not a SIF record of `envbuild sif`"),
        (json.dumps([record]), "is not a SIF record of `envbuild sif`"),
        ("{", "is not a readable SIF record"),
        ("\xff", "is not a readable SIF record"),
    ):
        side.write_bytes(broken.encode("latin-1") if broken == "\xff" else broken.encode())
        with pytest.raises(RunError, match=words):
            read_sidecar(sif)
    side.write_text(json.dumps(record))
    sif.write_bytes(b"changed")
    with pytest.raises(RunError, match="its sha256 differs from the one in cell.sif.json"):
        read_sidecar(sif)
    assert read_sidecar(sif, check_hash=False)["sha256"] == record["sha256"] != hashlib.sha256(b"changed").hexdigest()
    side.unlink()
    with pytest.raises(RunError, match="cell.sif.json is missing"):
        read_sidecar(sif)
    with pytest.raises(RunError, match="no such SIF file"):
        read_sidecar(tmp_path / "none.sif")


def test_a_runtime_killed_while_it_answers_version_has_no_line(tmp_path, monkeypatch, apptainer):
    monkeypatch.setenv("VERSION_KILL", "1")  # it prints Apptainer's line, then dies by a signal (exit code -9)
    binary = str(tmp_path / "bin" / "apptainer")
    assert runtime_record(binary) == {"name": None, "version": None, "version_line": None, "path": binary}


@pytest.mark.parametrize("ok, kill, expected_ok", [("1", "", False), ("true", "1", False), ("true", "", True)])
def test_verify_passes_only_on_a_report_of_true_from_a_check_that_exited_0(
    tmp_path, monkeypatch, apptainer, ok, kill, expected_ok
):
    """`"ok": 1` is not true; a check killed by a signal (exit code -9) after writing `"ok": true` did not pass."""
    monkeypatch.setenv("MODE", "verify")
    monkeypatch.setenv("VERIFY_OK", ok)
    monkeypatch.setenv("VERIFY_KILL", kill)
    (tmp_path / "work").mkdir()
    outcome = verify_in_sif(str(tmp_path / "bin" / "apptainer"), tmp_path / "x.sif", tmp_path / "work")
    assert (outcome["ok"], outcome["exit_code"]) == (expected_ok, -9 if kill else 0)


def test_verify_keeps_the_last_2000_characters_of_the_output(tmp_path, monkeypatch, apptainer):
    monkeypatch.setenv("MODE", "verify")
    monkeypatch.setenv("VERIFY_OK", "false")
    monkeypatch.setenv("VERIFY_NOISE", "2500")
    (tmp_path / "work").mkdir()
    outcome = verify_in_sif(str(tmp_path / "bin" / "apptainer"), tmp_path / "x.sif", tmp_path / "work")
    assert outcome["output_tail"] == ("x" * 2500 + "END\n")[-2000:]


@pytest.mark.parametrize("recorded", ["0" * 64, "f" * 64])
def test_a_sif_is_refused_whichever_way_its_hash_sorts_against_the_record(tmp_path, recorded):
    sif = make_sif(tmp_path / "sif")
    side = sif.with_name("cell.sif.json")
    side.write_text(json.dumps({**json.loads(side.read_text()), "sha256": recorded}))
    with pytest.raises(RunError, match="its sha256 differs from the one in cell.sif.json"):
        read_sidecar(sif)


def test_long_values_in_messages_are_cut_where_they_say(tmp_path, monkeypatch, apptainer):
    gpus = "0," * 40 + "x"
    ran = run(tmp_path, "pass", monkeypatch, "--gpus", gpus)
    assert ran.exit_code == 2 and f"--gpus {gpus[:60]!r}: use 'all'" in ran.output, ran.output
    out = tmp_path / ("o" * 200) / ("p" * 200 + ",x")  # over 300 characters, each part within the 255-byte limit
    ran = run(tmp_path, "pass", monkeypatch, "--out", str(out))
    assert ran.exit_code == 2 and f"--out {str(out)[:300]!r}: a path with a comma" in ran.output, ran.output


@pytest.mark.parametrize("flavor", ["xpu", "vulkan"])
def test_a_flavor_envbuild_does_not_know_gets_no_gpu_options(tmp_path, monkeypatch, apptainer, flavor):
    """Only the rocm and cuda flavors get --rocm / --nv (a name that sorts after theirs gets neither)."""
    cell = dict(ROCM, flavor=flavor)
    sif = make_sif(tmp_path / "sif", cell_key=Cell(**ROCM).key, cell=cell)
    ran = run(tmp_path, "pass", monkeypatch, sif=sif)
    assert ran.exit_code == 0, ran.output
    assert not {"--rocm", "--nv"} & set(argv(apptainer))


@pytest.mark.parametrize("code", ["1", "3", "137"])
def test_a_bad_input_line_with_another_exit_code_is_how_the_container_ended(tmp_path, monkeypatch, apptainer, code):
    """Only exit code 2 with the workload's bad-input line is bad input; any other code is recorded as it ended."""
    monkeypatch.setenv("EXIT_CODE", code)
    ran = run(tmp_path, "badinput", monkeypatch)
    assert ran.exit_code == 1, ran.output
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["error_class"] == "container_died"
    assert result["error"].startswith(f"apptainer exec exited with code {code};")


def _start_slow_run(tmp_path: Path, monkeypatch) -> subprocess.Popen:
    """`envbuild run workload --apptainer` in a subprocess whose container waits for $GO; returns once the
    container's first line is in container.log (the log is written line by line while the container runs)."""
    monkeypatch.setenv("MODE", "slow")
    monkeypatch.setenv("GO", str(tmp_path / "go"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from builder.cli import main; main()",
            "run",
            "workload",
            "--apptainer",
            str(make_sif(tmp_path / "sif")),
            "--out",
            str(tmp_path / "out"),
            "--no-record",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log, deadline = tmp_path / "out" / "container.log", time.monotonic() + 60
    while time.monotonic() < deadline and not (log.exists() and "[workload] step 1" in log.read_text()):
        time.sleep(0.1)
    assert log.read_text() == "[workload] step 1\n", "the first line did not reach container.log while it ran"
    return proc


def test_the_log_shows_each_line_while_the_container_runs(tmp_path, monkeypatch, apptainer):
    proc = _start_slow_run(tmp_path, monkeypatch)
    (tmp_path / "go").touch()
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    assert (tmp_path / "out" / "container.log").read_text() == "[workload] step 1\n[workload] pass\n"


def test_ctrl_c_stops_apptainer_and_the_run_ends_interrupted(tmp_path, monkeypatch, apptainer):
    proc = _start_slow_run(tmp_path, monkeypatch)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert "Traceback" not in output
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert (result["status"], result["error_class"]) == ("error", "interrupted")
    assert (
        (tmp_path / "out" / "container.log")
        .read_text()
        .endswith("# envbuild: interrupted (Ctrl-C); stopping apptainer\n")
    )
