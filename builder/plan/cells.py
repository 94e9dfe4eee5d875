"""A matrix cell: the coordinates that one build and its runs are compared on."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

# What a coordinate may hold: it becomes part of the cell key, which names files and URLs. A flavor is
# letters only, so the version glued to it (`cuda13.0`) starts where the letters end: `cuda1` + `3.0`
# cannot spell the same key as `cuda` + `13.0`.
_VERSION = re.compile(r"[0-9]+(\.[0-9A-Za-z]+){0,3}")
_FLAVOR = re.compile(r"[a-z]{1,16}")
_ARCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+-]{0,39}")
#: The key's grammar: versions hold no "-", so the torch and Python parts, and the arch between them, are unique.
_KEY = re.compile(
    r"(?P<flavor>[a-z]+)(?P<accel_version>[0-9][^-]*)?-torch(?P<torch>[^-]+)"
    r"(?:-(?P<arch>.+?))?-py(?P<python>[^-]+)"
)


class Cell(BaseModel):
    """One (flavor, accelerator version, torch line, GPU arch, Python) combination.

    `torch` and `python` are release lines ("2.4", "3.10"); `accel_version` is the ROCm or CUDA
    release ("6.2", "6.1.2") and None for the cpu flavor; `arch` is a GPU target ("gfx90a") or None.
    """

    model_config = ConfigDict(frozen=True)

    flavor: str
    accel_version: str | None = None
    torch: str
    arch: str | None = None
    python: str

    @field_validator("flavor")
    @classmethod
    def _flavor(cls, value: str) -> str:
        return _valid_field("flavor", value, _FLAVOR, "lower-case letters only, e.g. rocm")

    @field_validator("accel_version", "torch", "python")
    @classmethod
    def _version(cls, value: str | None, info) -> str | None:
        return None if value is None else _valid_field(info.field_name, value, _VERSION, "a release like 6.2 or 2.4")

    @field_validator("arch")
    @classmethod
    def _arch(cls, value: str | None) -> str | None:
        return None if value is None else _valid_field("arch", value, _ARCH, "a GPU target like gfx90a")

    @model_validator(mode="after")
    def _key_parses_back(self) -> "Cell":
        """The key and the coordinates name each other, both ways (no two cells share a key)."""
        if _parse_key(self.key) != self.model_dump():
            raise ValueError(f"cell key {self.key!r} does not parse back to these coordinates")
        return self

    @classmethod
    def from_key(cls, key: str) -> "Cell":
        """The cell a key names (`rocm6.2-torch2.4-gfx90a-py3.10`); ValueError for anything else."""
        coords = _parse_key(key)
        if coords is None:
            raise ValueError(f"{key!r} is not a cell key like rocm6.2-torch2.4-gfx90a-py3.10")
        cell = cls(**coords)
        if cell.key != key:
            raise ValueError(f"{key!r} is not the key of its own coordinates ({cell.key!r})")
        return cell

    @property
    def key(self) -> str:
        """Stable, human-readable id, e.g. `rocm6.2-torch2.4-gfx90a-py3.10` or `cpu-torch2.13-py3.11`."""
        parts = [f"{self.flavor}{self.accel_version or ''}", f"torch{self.torch}"]
        if self.arch:
            parts.append(self.arch)
        parts.append(f"py{self.python}")
        return "-".join(parts)

    @classmethod
    def from_result(cls, result: dict) -> "Cell":
        """The cell a workload result.json was measured in: the cell follows the device that ran.

        An image's manifest names its cell, unless the run says it ran on the CPU: then it is the cpu cell of its
        torch line and Python (a CPU measurement of that build, never its GPU cell's verdict). Without a manifest
        the versions and the device decide: a ROCm or CUDA cell only where the run read a GPU arch."""
        manifest = (result.get("image") or {}).get("manifest")
        hardware = result.get("hardware") or {}
        if manifest and manifest.get("cell"):
            cell = cls(**manifest["cell"])
            if cell.flavor != "cpu" and hardware.get("device_type") == "cpu":
                return cls(flavor="cpu", torch=cell.torch, python=cell.python)
            return cell
        versions = result["versions"]
        gpu = bool(hardware.get("arch"))
        if gpu and versions.get("hip"):
            flavor, accel = "rocm", _release_line(versions["hip"], 2)  # hip carries no patch level
        elif gpu and versions.get("cuda"):
            flavor, accel = "cuda", _release_line(versions["cuda"], 2)
        else:
            flavor, accel = "cpu", None
        return cls(
            flavor=flavor,
            accel_version=accel,
            torch=_release_line(versions["torch"], 2),
            arch=hardware.get("arch") if flavor != "cpu" else None,
            python=_release_line(versions["python"], 2),
        )


def _parse_key(key: str) -> dict | None:
    match = _KEY.fullmatch(key) if isinstance(key, str) else None
    return match.groupdict() if match else None


def _release_line(version: str, parts: int) -> str:
    """The first `parts` release fields: '2.4.1+rocm6.2' -> '2.4'; '6.2.41133-dd7f95766' -> '6.2'."""
    return ".".join(version.split("+")[0].split("-")[0].split(".")[:parts])


def _valid_field(name: str, value: str, pattern: re.Pattern, expected: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValueError(f"cell {name} {value!r} is not valid: expected {expected}")
    return value
