"""A stand-in workload image for container-run tests: real containers that pass, die, hang or lie.

`python3 -m workload train --out DIR ...` in this image behaves as DIR/fake-mode says (`fake_mode`), else as
`--preset MODE` says. A mode file keeps the run the verdict configuration (the smoke preset as it stands,
docs/matrix.md), so a crash of the stand-in is a verdict, as a crash of the real workload would be. It also
reports what it saw of its mounts and environment so tests can check them from the outside.
"""

from __future__ import annotations

import json
from pathlib import Path

from builder.engine.build import BuildOptions, build_image
from builder.plan.render import read_manifest

FAKE_WORKLOAD = r"""
import json, os, signal, sys, time, uuid

args = sys.argv[1:]
opt = lambda name: args[args.index(name) + 1] if name in args else None
out = opt("--out")
mode_file = os.path.join(out, "fake-mode")
mode = open(mode_file).read().strip() if os.path.exists(mode_file) else opt("--preset")

def writable(path):
    try:
        with open(os.path.join(path, ".probe"), "w"):
            return True
    except OSError:
        return False

def write(status, error_class=None):
    result = {"schema_version": 1, "run_id": uuid.uuid4().hex, "command": "train", "status": status,
              "error_class": error_class, "error": None if status == "pass" else mode,
              "started_at": "2026-12-02T13:00:00Z", "finished_at": "2026-12-02T13:00:01Z", "wall_time_s": 1.0,
              "versions": {"python": "3.11.2", "torch": "2.13.0+cpu"},
              "seen": {"args": args, "hf_token": os.environ.get("HF_TOKEN"),
                       "model_writable": writable(opt("--model")) if opt("--model") and os.path.isdir(opt("--model")) else None,
                       "data_listing": sorted(os.listdir(opt("--data"))) if opt("--data") else None,
                       "data_writable": writable(opt("--data")) if opt("--data") else None}}
    tmp = os.path.join(out, ".result.tmp")
    with open(tmp, "w") as handle:
        json.dump(result, handle)
    os.replace(tmp, os.path.join(out, "result.json"))

print(f"fake workload: {mode}", flush=True)
if mode == "pass":
    write("pass")
elif mode == "die":
    os._exit(137)  # as if OOM-killed (PID 1 of a container cannot SIGKILL itself)
elif mode == "pass-then-crash":
    write("pass")
    sys.exit(3)
elif mode == "garbage":
    with open(os.path.join(out, "result.json"), "w") as handle:
        handle.write('{"schema_version": 1, "status": "pa')
elif mode == "bad-input":  # what the real workload does with bad data: one line, exit 2, no result
    print("[workload] bad input: /data/d.jsonl:3: not valid JSON (Expecting value)", file=sys.stderr, flush=True)
    sys.exit(2)
elif mode == "sleep":
    print("sleeping", flush=True)
    time.sleep(300)
"""

MANIFEST = {
    "image_tag": "envbuild-test/fake-workload:1",
    "context_hash": "fake",
    "cell": {"flavor": "cpu", "accel_version": None, "torch": "2.13", "arch": None, "python": "3.11"},
}


def fake_mode(out: Path, mode: str) -> Path:
    """Make `out` (a run's --out) with the stand-in's mode in it; returns `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "fake-mode").write_text(mode)
    return out


def build_fake_workload_image(tools_image: str, workdir: Path) -> str:
    ctx = workdir / "fake-workload"
    (ctx / "workload").mkdir(parents=True)
    (ctx / "workload" / "__init__.py").write_text("")
    (ctx / "workload" / "__main__.py").write_text(FAKE_WORKLOAD)
    (ctx / "manifest.json").write_text(json.dumps(MANIFEST))
    (ctx / "Dockerfile").write_text(f"FROM {tools_image}\nCOPY workload /opt/fake/workload\nENV PYTHONPATH=/opt/fake\n")
    build_image(ctx, MANIFEST["image_tag"], BuildOptions(network="host", force=True), manifest=read_manifest(ctx))
    return MANIFEST["image_tag"]
