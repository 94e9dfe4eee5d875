"""The image proves itself at the end of its build: what got installed is what the manifest pinned.

Usage: python verify_image.py EXPECT_JSON OUT_JSON   (EXPECT_JSON is the context's expect.json)

Checks, each a line of output; any failure fails the build with what was expected and what was found:
- torch: the exact version (local label included) from its distribution metadata and torch.__version__,
  installed by path when the route says so (a source build's wheel, never an index's same-version wheel);
- the backend: torch.version.hip set (rocm) with the release's major.minor, torch.version.cuda (cuda),
  neither (cpu);
- the arch: the requested GPU arch in the list torch was compiled for. torch.cuda.get_arch_list() returns []
  without a visible GPU in torch 2.3-2.6 (it checks is_available() first), so the compiled list is read
  with torch._C._cuda_getArchFlags(), which get_arch_list itself splits; plus code objects for it in what
  torch loads: torch's own libraries and, through DT_NEEDED, the libraries they name in torch/lib or the ROCm
  lib dirs, /opt/rocm/lib or TheRock's /opt/rocm/core-<version>/lib (workload.binaries.rocm_layout; $ROCM_PATH first)
  (workload.binaries.code_object_reader.loaded_split, the rule of the arch probe and `envbuild inspect IMAGE`),
  when they can be read. A library there that torch does not load and that lacks the arch (hipSPARSELt ships
  gfx942/gfx950 only) is a note in OUT_JSON's "notes", not a failure;
- torch.compile's backend (expect.json "compile_package", a source build whose line has a verified pin): the
  pinned version installed (pytorch-triton-rocm==3.0.0) and its module importable (triton);
- the accelerator wheels (expect.json "accel_wheels", the pip-ROCm route): each package the requirements bring is
  installed, and no per-arch device package of another arch (rocm-sdk-device-gfx950 in a gfx942 image; device-all
  would install them all);
- sentencepiece: installed from the wheel built in the image (a local `linux_*` wheel from a file), not a
  PyPI binary (`manylinux`);
- every pin of the lock (requirements.lock, and venv.lock's pip/setuptools/wheel where the stack does not pin
  them) equals the installed version;
- nothing else is installed (expect.json "complete"): every distribution is locked, is torch, is a
  requirement of torch that its index supplied (e.g. pytorch-triton-rocm), is the compile backend above, or is
  one of the accelerator wheels above; those are listed as "unlocked".
torch.compile is never run here: the build host has no GPU, and some wheels cannot compile without one
(expect.json "compile_needs_gpu", e.g. torch 2.13.0+rocm7.2, pytorch/pytorch#189194); such a wheel is a note.
OUT_JSON records every check, the unlocked distributions, the arch coverage (what torch loads, with
"not_loaded" for the rest) and the notes.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
import sys
from pathlib import Path


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _direct_url(dist: str) -> str:
    text = md.distribution(dist).read_text("direct_url.json")
    return json.loads(text).get("url", "") if text else ""


def _wheel_tags(dist: str) -> list[str]:
    text = md.distribution(dist).read_text("WHEEL") or ""
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")]


def compiled_archs(torch) -> list[str]:
    """The GPU archs torch was compiled for, without needing a visible GPU (base names: gfx90a, sm_90)."""
    flags = None
    getter = getattr(torch._C, "_cuda_getArchFlags", None)
    if getter is not None:
        flags = getter()
    if not flags:
        flags = " ".join(torch.cuda.get_arch_list())
    return sorted({item.split(":")[0] for item in re.split(r"[\s;]+", flags or "") if item})


def check_torch(expect: dict, checks: list) -> None:
    import torch

    want = expect["torch"]["version"]
    installed = md.version("torch")
    checks.append(
        (
            "torch version",
            installed == want == torch.__version__,
            f"expected {want}; metadata {installed}, torch.__version__ {torch.__version__}",
        )
    )
    if expect["torch"]["by_path"]:
        url = _direct_url("torch")
        checks.append(
            (
                "torch installed by path",
                url.startswith("file://"),
                f"expected the built wheel from a file; direct_url.json says {url or 'an index'}",
            )
        )
    backend, prefix = expect["backend"], expect.get("backend_version")
    hip, cuda = torch.version.hip, torch.version.cuda
    if backend == "hip":
        ok = hip is not None and (not prefix or hip.split(".")[:2] == prefix.split(".")[:2])
        checks.append(("torch.version.hip", ok, f"expected HIP {prefix}.x; found hip={hip} cuda={cuda}"))
    elif backend == "cuda":
        ok = cuda is not None and (not prefix or cuda.split(".")[:2] == prefix.split(".")[:2])
        checks.append(("torch.version.cuda", ok, f"expected CUDA {prefix}.x; found cuda={cuda} hip={hip}"))
    else:
        checks.append(("cpu-only torch", hip is None and cuda is None, f"found hip={hip} cuda={cuda}"))
    if expect.get("arch"):
        archs = compiled_archs(torch)
        checks.append(
            (
                f"compiled for {expect['arch']}",
                expect["arch"] in archs,
                f"torch was compiled for {', '.join(archs) or 'no GPU arch'}; kernels on {expect['arch']} "
                "would fail with 'HIP error: invalid device function'",
            )
        )


def check_compile_package(expect: dict, checks: list) -> None:
    """torch.compile's backend of a source build: the pinned version, and its module imports."""
    package = expect.get("compile_package")
    if not package:
        return
    import importlib

    name, want = package["name"], package["version"]
    try:
        got = md.version(name)
    except md.PackageNotFoundError:
        got = None
    try:
        importlib.import_module(package["import"])
        imported = ""
    except Exception as exc:  # noqa: BLE001 - any import failure means torch.compile would fail
        imported = f"; import {package['import']} failed: {type(exc).__name__}: {exc}"
    checks.append(
        (
            f"{name}=={want} for torch.compile",
            got == want and not imported,
            f"expected {name} {want}; found {got or 'nothing'}{imported}",
        )
    )


def check_accel_wheels(expect: dict, checks: list) -> None:
    """The pip-ROCm route: the SDK wheels of the cell's arch are installed, and no other arch's device package."""
    accel = expect.get("accel_wheels")
    if not accel:
        return
    installed = _installed()
    missing = [p for p in accel["packages"] if _name(p) not in installed]
    checks.append(
        (f"{len(accel['packages'])} accelerator wheels installed", not missing, f"missing: {', '.join(missing)}")
    )
    mine = {_name(p) for p in accel["device_packages"]}
    others = sorted(
        f"{n}=={v}"
        for n, v in installed.items()
        if n not in mine and any(n.startswith(_name(prefix)) for prefix in accel["device_prefixes"])
    )
    checks.append(
        (
            f"only {', '.join(sorted(mine))} of the per-arch device packages",
            not others,
            f"device code of other archs is installed (device-all?): {', '.join(others)}",
        )
    )


def compile_note(expect: dict, notes: list) -> None:
    """A wheel whose torch.compile needs a GPU: say so when this host has none (the workload then runs eager)."""
    reason = expect.get("compile_needs_gpu")
    if not reason:
        return
    import torch

    if not torch.cuda.is_available():
        notes.append(f"torch.compile not exercised on this host (no GPU): {reason}")


def check_sentencepiece(expect: dict, checks: list) -> None:
    version, tags, url = md.version("sentencepiece"), _wheel_tags("sentencepiece"), _direct_url("sentencepiece")
    built_here = url.startswith("file://") and bool(tags) and not any("manylinux" in t for t in tags)
    checks.append(
        (
            "sentencepiece built here",
            built_here and version == expect["sentencepiece"],
            f"expected {expect['sentencepiece']} from the wheel built in the image; found {version}, "
            f"tags {tags}, from {url or 'an index'}",
        )
    )


def _installed() -> dict[str, str]:
    installed: dict[str, str] = {}
    for dist in md.distributions():  # the first on sys.path wins, as for import and importlib.metadata.version
        installed.setdefault(_name(dist.metadata["Name"]), dist.version)
    return installed


def _locked(expect: dict) -> dict[str, str]:
    """Every pin of the lock by normalized name: the stack's, and venv.lock's where the stack does not pin it."""
    return {_name(n): v for n, v in {**expect.get("venv", {}), **expect["lock"]}.items()}


def check_lock(expect: dict, checks: list) -> None:
    installed = _installed()
    pins = _locked(expect)
    wrong = {n: (v, installed.get(n)) for n, v in pins.items() if installed.get(n) != v}
    checks.append(
        (
            f"{len(pins)} pins of the lock installed",
            not wrong,
            "; ".join(f"{n}: pinned {v}, installed {got or 'nothing'}" for n, (v, got) in wrong.items()),
        )
    )


def check_complete(expect: dict, checks: list) -> list[str] | None:
    """Every installed distribution is locked, or is torch, or a requirement of torch (from torch's index)."""
    if not expect.get("complete"):
        return None
    locked = _locked(expect)
    torch_needs = {_name(expect["compile_package"]["name"])} if expect.get("compile_package") else set()
    torch_needs |= {_name(p) for p in (expect.get("accel_wheels") or {}).get("packages", [])}
    for requirement in md.requires("torch") or []:
        if "extra ==" not in requirement:
            torch_needs.add(_name(re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0]))
    unlocked, stray = [], []
    for name, version in sorted(_installed().items()):
        if name != "torch" and name not in locked:
            (unlocked if name in torch_needs else stray).append(f"{name}=={version}")
    checks.append(
        (
            "every installed distribution is locked",
            not stray,
            f"not in the lock and not a requirement of torch: {', '.join(stray)}",
        )
    )
    return unlocked


def arch_coverage(expect: dict, checks: list, notes: list) -> dict | None:
    """Code objects for the cell's arch: a check on what torch loads, a note on the libraries it does not."""
    if not expect.get("arch") or expect["backend"] != "hip":
        return None
    from workload.binaries.code_object_reader import library_dirs, loaded_split

    arch = expect["arch"]
    loaded, other = loaded_split(*library_dirs(), arch)
    if loaded.verdict != "unknown":
        checks.append(
            (
                f"code objects for {arch} in what torch loads",
                loaded.verdict == "present",
                f"missing in {', '.join(loaded.missing_in())} (loaded by torch); found "
                f"{', '.join(loaded.archs) or 'no arch'}",
            )
        )
    if other.missing_in():
        notes.append(f"{arch} is missing in {', '.join(other.missing_in())}, which torch does not load")
    return {**loaded.to_json(), "not_loaded": other.to_json()}


def main(expect_path: str, out_path: str) -> int:
    expect = json.loads(Path(expect_path).read_text())
    checks: list[tuple[str, bool, str]] = []
    check_torch(expect, checks)
    check_compile_package(expect, checks)
    check_accel_wheels(expect, checks)
    check_sentencepiece(expect, checks)
    check_lock(expect, checks)
    unlocked = check_complete(expect, checks)
    notes: list[str] = []
    coverage = arch_coverage(expect, checks, notes)
    compile_note(expect, notes)
    for name, ok, detail in checks:
        print(f"verify: {'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"))
    for note in notes:
        print(f"verify: note {note}")
    record = {
        "cell": expect["cell"],
        "ok": all(ok for _, ok, _ in checks),
        "checks": [{"name": n, "ok": ok, "detail": None if ok else d} for n, ok, d in checks],
        "unlocked": unlocked,
        "arch_coverage": coverage,
        "notes": notes,
    }
    Path(out_path).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    if not record["ok"]:
        print(
            f"verify: the image does not match its manifest ({expect['cell']}); see the FAIL lines above",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
