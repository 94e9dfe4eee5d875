"""envbuild host-side tool: render, build, run, record and report ROCm fine-tuning environments."""

__version__ = "0.1.0"
