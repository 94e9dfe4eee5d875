"""The conditions a measurement ran under, recorded into its result.json (`conditions`, docs/result-schema.md).

`Watch.start(db)` before the workload starts and `watch.finish()` after it ended read, on the host that runs
it: the load average at both ends, the CPU count and the cgroup's CPU limit, the GPUs' other processes, clocks
and power cap (nvidia-smi, rocm-smi or /sys, where readable; our own workload is not running at either
snapshot, so every compute process seen is another's), and whether another `envbuild run` was writing to the
same matrix file while this one ran (each run leaves a small marker in `<db>.in-flight/` while it runs, and while
a run that overlapped it still runs; the folder goes with the last marker). A run that something
competed with is `contended`, with the reasons; the report marks it and never plots or ranks it unmarked.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

#: A marker of a finished run is kept while a run that overlapped it still runs, and never longer than this.
MARKER_KEEP_S = 2 * 24 * 3600
SMI_TIMEOUT_S = 10


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs the cgroup may use (cgroup v2 cpu.max, v1 cfs quota / period); None when unlimited or unreadable."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def _tool_stdout(argv: list[str]) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _float(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if value >= 0 else None


def gpu_snapshot() -> dict | None:
    """Other processes on the GPUs, SM clock, max SM clock and power cap: nvidia-smi, else rocm-smi, else /sys."""
    apps = _tool_stdout(
        ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits"]
    )
    if apps is not None:
        procs = []
        for line in apps.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 3 and parts[0].isdigit():
                procs.append({"pid": int(parts[0]), "name": parts[1][:200], "used_memory_mib": _float(parts[2])})
        out: dict = {"tool": "nvidia-smi", "other_processes": procs}
        gpus = _tool_stdout(
            ["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,power.limit", "--format=csv,noheader,nounits"]
        )
        first = (gpus or "").splitlines()[:1]
        if first:
            values = [_float(v) for v in first[0].split(",")] + [None, None, None]
            out.update(sm_clock_mhz=values[0], max_sm_clock_mhz=values[1], power_limit_w=values[2])
        return out
    pids = _tool_stdout(["rocm-smi", "--showpids", "--json"])
    if pids is not None:
        try:
            data = json.loads(pids)
        except ValueError:
            data = {}
        procs = [
            {"pid": int(k.split()[-1]), "name": str(v)[:200]}
            for k, v in (data.get("system") or {}).items()
            if k.startswith("PID") and k.split()[-1].isdigit()
        ]
        return {"tool": "rocm-smi", "other_processes": procs, **_sysfs_clocks()}
    sysfs = _sysfs_clocks()
    return {"tool": "sysfs", **sysfs} if sysfs else None


def _sysfs_clocks(drm: Path = Path("/sys/class/drm")) -> dict:
    """The first amdgpu card's current SM clock (pp_dpm_sclk, the line marked *) and power cap (hwmon, µW)."""
    for card in sorted(drm.glob("card[0-9]*/device")):
        out: dict = {}
        try:
            for line in (card / "pp_dpm_sclk").read_text().splitlines():
                if line.rstrip().endswith("*"):
                    out["sm_clock_mhz"] = _float(line.split(":")[1].strip().split("Mhz")[0].rstrip("*").strip())
        except (OSError, IndexError):
            pass
        for cap in card.glob("hwmon/hwmon*/power1_cap"):
            try:
                out["power_limit_w"] = int(cap.read_text()) / 1e6
            except (OSError, ValueError):
                pass
        if out:
            return out
    return {}


def judge(
    load_start: float | None,
    load_end: float | None,
    cpus: float,
    gpu_start: dict | None,
    gpu_end: dict | None,
    other_runs: int | None,
) -> list[str]:
    """Why a measurement was contended ([] = it was not): another envbuild run on the matrix, other processes on
    the GPUs, or a load average that leaves the run less than the machine's CPUs (our own run adds about one CPU
    per busy thread to the load at its end, so the end's threshold is higher)."""
    reasons = []
    if other_runs:
        reasons.append(f"{other_runs} other envbuild run(s) were writing to this matrix meanwhile")
    others = {p.get("pid") for g in (gpu_start, gpu_end) if g for p in g.get("other_processes") or []}
    if others:
        reasons.append(f"{len(others)} other process(es) on the GPUs")
    if load_start is not None and load_start > 0.5 * cpus + 0.5:
        reasons.append(f"load average {load_start:.1f} at the start on {cpus:g} CPUs")
    if load_end is not None and load_end > 1.5 * cpus + 1:
        reasons.append(f"load average {load_end:.1f} at the end on {cpus:g} CPUs")
    return reasons


@dataclass
class Watch:
    """One measurement's conditions, from `start` to `finish`."""

    markers: Path | None
    started: float = field(default_factory=time.time)
    load_start: float | None = None
    gpu_start: dict | None = None
    marker: Path | None = None
    others_at_start: int = 0

    @classmethod
    def start(cls, db: Path | None) -> "Watch":
        """Take the first snapshot and leave this run's marker beside the matrix file `db` (None: not recording)."""
        watch = cls(markers=Path(f"{db}.in-flight") if db is not None else None)
        watch.load_start = os.getloadavg()[0]
        watch.gpu_start = gpu_snapshot()
        if watch.markers is not None:
            try:
                watch.marker = watch.markers / f"{os.getpid()}-{uuid.uuid4().hex[:12]}.json"
                record = {"host": socket.gethostname(), "pid": os.getpid(), "started": watch.started, "finished": None}
                for attempt in range(3):  # a run finishing now may remove the empty folder between mkdir and write
                    watch.markers.mkdir(exist_ok=True)  # a new matrix folder is the store's to make (and say so)
                    try:
                        watch.marker.write_text(json.dumps(record))
                        break
                    except FileNotFoundError:
                        if attempt == 2:
                            raise
                watch.others_at_start = len(watch._overlapping(time.time()))
            except OSError:
                watch.marker = None
        return watch

    def _overlapping(self, until: float) -> list[Path]:
        """Other runs' markers whose time overlaps this run's; old finished markers and dead runs' are removed."""
        found = []
        now = time.time()
        for path in self.markers.glob("*.json") if self.markers else ():
            if path == self.marker:
                continue
            try:
                other = json.loads(path.read_text())
                started, finished = float(other["started"]), other.get("finished")
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if finished is None and not _marker_run_alive(other):
                finished = started  # a run killed outright: count it no further
            if finished is not None and now - float(finished) > MARKER_KEEP_S:
                path.unlink(missing_ok=True)
                continue
            if started <= until and (finished is None or float(finished) >= self.started):
                found.append(path)
        return found

    def discard(self) -> None:
        """The run ended before it measured anything: remove its marker (and the folder when it is empty)."""
        if self.marker is not None:
            self.marker.unlink(missing_ok=True)
            self.marker = None
            try:
                self.markers.rmdir()
            except OSError:
                pass  # other runs' markers are in it

    def _prune(self) -> None:
        """Remove the markers no running run still needs, and the folder once it is empty. A running run needs a
        finished run's marker only when it started before that run finished (it counts it when it finishes)."""
        running, ended = [], {}
        for path in self.markers.glob("*.json"):
            try:
                other = json.loads(path.read_text())
                started, finished = float(other["started"]), other.get("finished")
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if finished is None and _marker_run_alive(other):
                running.append(started)
            else:
                ended[path] = started if finished is None else float(finished)
        for path, finished in ended.items():
            if not any(started <= finished for started in running):
                path.unlink(missing_ok=True)
        try:
            self.markers.rmdir()
        except OSError:
            pass  # a running run's marker (or one this run could not read) is in it

    def finish(self) -> dict:
        """The `conditions` block: the second snapshot, the overlap with other runs, the verdict on contention."""
        finished = time.time()
        load_end = os.getloadavg()[0]
        gpu_end = gpu_snapshot()
        cpus = os.cpu_count() or 1
        limit = cgroup_cpu_limit()
        other_runs = None
        if self.marker is not None:
            other_runs = max(self.others_at_start, len(self._overlapping(finished)))
            try:
                record = json.loads(self.marker.read_text())
                self.marker.write_text(json.dumps({**record, "finished": finished}))
            except (OSError, ValueError):
                pass
            self._prune()
        gpu = None
        if gpu_start := self.gpu_start or gpu_end:
            procs = {p["pid"]: p for g in (self.gpu_start, gpu_end) if g for p in g.get("other_processes") or []}
            gpu = {**gpu_start, **(gpu_end or {}), "other_processes": list(procs.values())}
            gpu = {k: v for k, v in gpu.items() if v is not None or k == "tool"}
        reasons = judge(self.load_start, load_end, min(cpus, limit or cpus), self.gpu_start, gpu_end, other_runs)
        return {
            "load_average": {"start": round(self.load_start, 2), "end": round(load_end, 2)},
            "cpu_count": cpus,
            "cgroup_cpu_limit": limit,
            "gpu": gpu,
            "other_envbuild_runs": other_runs,
            "contended": bool(reasons),
            "contention": reasons,
        }


def _marker_run_alive(marker: dict) -> bool:
    """Whether the run that wrote `marker` still runs (a marker of another host: assumed so)."""
    if marker.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(marker["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, KeyError, TypeError):
        return True
    return True
