"""A matrix cell: the coordinates that one build and its runs are compared on."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


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
        """The cell a workload result.json was measured in (image manifest first, else its versions)."""
        manifest = (result.get("image") or {}).get("manifest")
        if manifest and manifest.get("cell"):
            return cls(**manifest["cell"])
        versions, hardware = result["versions"], result.get("hardware") or {}
        if versions.get("hip"):
            flavor, accel = "rocm", _release_line(versions["hip"], 2)  # hip carries no patch level
        elif versions.get("cuda"):
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


def _release_line(version: str, parts: int) -> str:
    """The first `parts` release fields: '2.4.1+rocm6.2' -> '2.4'; '6.2.41133-dd7f95766' -> '6.2'."""
    return ".".join(version.split("+")[0].split("-")[0].split(".")[:parts])
