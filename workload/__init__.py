"""The in-image fine-tune and environment probes. Depends on torch/transformers/peft only; never imports `builder`."""

__version__ = "0.1.0"
