"""A stand-in workload package for golden-file tests (the real workload/ changes independently)."""
