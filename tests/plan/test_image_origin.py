"""Vendor images are recognised by their name or path alone, and nothing else passes for one."""

from __future__ import annotations

import pytest

from builder.plan.image_origin import vendor_label


@pytest.mark.parametrize(
    ("tag", "label"),
    [
        (
            "rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0",
            "AMD image rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0",
        ),
        ("docker.io/rocm/pytorch:latest", "AMD image rocm/pytorch:latest"),
        ("rocm/pytorch", "AMD image rocm/pytorch"),
        (
            "/appl/local/containers/sif-images/lumi-pytorch-rocm-6.0.3-python-3.12-pytorch-v2.3.1.sif",
            "LUMI SIF lumi-pytorch-rocm-6.0.3-python-3.12-pytorch-v2.3.1.sif",
        ),
    ],
)
def test_vendor_images_are_named(tag, label):
    assert vendor_label(tag) == label


@pytest.mark.parametrize(
    "tag",
    [
        "evil/rocm/pytorch:x",
        "rocm/pytorch-evil:x",
        "myregistry.example/rocm/pytorch:x",
        "rocm/pytorch:<b>x</b>",
        "/appl/local/containers/../../tmp/x.sif",
        "/home/u/appl/local/containers/x.sif",
        "envbuild/rocm:abc",
        None,
        3,
    ],
)
def test_nothing_else_passes_for_a_vendor_image(tag):
    assert vendor_label(tag) is None
