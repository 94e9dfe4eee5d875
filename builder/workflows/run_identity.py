"""What an image envbuild did not build says about its run, checked against what this host checked itself
(docs/measure-any-image.md, "Threat model").

The image's code writes its result, so the result says whatever the image wants. Before it is written or recorded,
its claims meet the host's own facts, which the engine put in the image block (`checked.by_host`): the GPUs this host
sees (the doctor's KFD topology for AMD, the NVIDIA driver's list) and the kind of device envbuild passed into the
container. A result that names a GPU needs that kind of device passed, the host to see a GPU of that vendor and, for
AMD, the arch it names; no more GPUs than the host has; and the versions the probe read before the run. Any
disagreement is IdentityMismatch (bad input: exit 2, nothing written, nothing recorded), naming both sides.
"""

from __future__ import annotations

from builder.engine.container import RunError
from builder.slug import escaped

_VENDOR_DEVICES = {"amd": "rocm", "nvidia": "cuda"}
_PROBED = (("python", "python"), ("torch", "torch"), ("hip", "torch_hip"), ("cuda", "torch_cuda"))


class IdentityMismatch(RunError):
    """The result of an image envbuild did not build claims what this host did not see or give it."""


def check_foreign_claims(result: dict, out_dir) -> None:
    """IdentityMismatch when the result of an image envbuild did not build (image origin `foreign`) disagrees with
    what the host checked; any other result passes unchecked. `out_dir` is named where the image's output stays."""
    image = result.get("image") if isinstance(result.get("image"), dict) else {}
    if image.get("origin") != "foreign":
        return
    host = image["checked"]["by_host"]
    problems = _version_problems(result.get("versions") or {}, image.get("probe") or {})
    problems += _gpu_problems(result.get("hardware") or {}, host["devices_passed"], host["gpus_seen"])
    if problems:
        raise IdentityMismatch(
            f"the image's own result disagrees with what this host checked: {'; '.join(problems)}. Nothing was "
            f"recorded and no result.json written; what the image printed and wrote stays in {out_dir} "
            "(container.log, from-image/)"
        )


def _version_problems(versions: dict, probe: dict) -> list[str]:
    return [
        f"its result names {key} {escaped(str(versions.get(key)))}, its probe read {escaped(str(probe.get(field)))}"
        for key, field in _PROBED
        if versions.get(key) != probe.get(field)
    ]


def claims_gpu(hardware: dict) -> bool:
    """Whether a result's hardware block names a GPU (any field of one)."""
    return bool(
        hardware.get("device_type") not in (None, "cpu")
        or hardware.get("vendor") not in (None, "cpu")
        or hardware.get("arch")
        or hardware.get("gpu_name")
        or (hardware.get("gpu_count") or 0) > 0
    )


def _gpu_problems(hardware: dict, passed: str, seen: dict) -> list[str]:
    if not claims_gpu(hardware):
        return []
    vendor, arch = hardware.get("vendor"), hardware.get("arch")
    claim = escaped(f"{vendor} GPU {arch} ({hardware.get('gpu_name')}, {hardware.get('gpu_count')} of them)")
    host = f"this host sees {_seen(seen)}"
    kind = _VENDOR_DEVICES.get(vendor)
    if passed == "none":
        return [f"it says it ran on {claim}, but envbuild passed no GPU into the container ({host})"]
    if kind != passed:
        return [f"it says it ran on {claim}, but envbuild passed {passed} devices into the container ({host})"]
    mine = seen.get(vendor) or []
    if not mine:
        return [f"it says it ran on {claim}, but {host}"]
    if kind == "rocm" and arch not in mine:
        return [f"it says it ran on {claim}, but {host} (KFD topology)"]
    count = hardware.get("gpu_count")
    if isinstance(count, int) and count > len(mine):
        return [f"it says it ran on {claim}, but {host}"]
    return []


def _seen(seen: dict) -> str:
    """The host's GPUs in words: `seen` lists one arch per AMD GPU and one model per NVIDIA GPU."""
    parts = [f"{name} {', '.join(seen[key])}" for key, name in (("amd", "AMD"), ("nvidia", "NVIDIA")) if seen.get(key)]
    return "; ".join(parts) or "no GPU (no KFD GPU node, no NVIDIA driver GPU)"
