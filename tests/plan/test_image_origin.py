"""A vendor's name is shown only where the engine's digest backs it: "AMD image" needs a RepoDigest in AMD's
repository, "digest as AMD publishes it" one of the digests AMD's docs link (recipes/amd-images.toml); a name or a
path alone is shown as it is, its origin unverified."""

from __future__ import annotations

import re
import tomllib

import pytest

from builder.plan.image_origin import AMD_IMAGES_FILE, amd_published, vendor_label

PUBLISHED = "sha256:931d3e3dcebe6c6fab84adf16cfca3e1d1449100df7c881a46fccd06f6c9bc1c"  # rocm6.2 ..._2.3.0 (22.04)
OTHER = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("image", "label"),
    [
        (
            {"tag": "rocm/pytorch:anything", "repo_digests": [f"rocm/pytorch@{PUBLISHED}"]},
            "AMD image rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0 (digest as AMD publishes it)",
        ),
        (
            {"tag": "mine:1", "repo_digests": ["mine@" + OTHER, f"docker.io/rocm/pytorch@{PUBLISHED}"]},
            "AMD image rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0 (digest as AMD publishes it)",
        ),
        (
            {"tag": "rocm/pytorch:latest", "repo_digests": [f"rocm/pytorch@{OTHER}"]},
            f"AMD image rocm/pytorch@{OTHER} (pulled from AMD's repository; a digest AMD's docs do not list)",
        ),
        (
            {"tag": "rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0", "repo_digests": []},
            "rocm/pytorch:rocm6.2_ubuntu22.04_py3.10_pytorch_release_2.3.0 (a local name: origin unverified)",
        ),
        ({"tag": "docker.io/rocm/pytorch:latest"}, "docker.io/rocm/pytorch:latest (a local name: origin unverified)"),
        (
            {"tag": "/appl/local/containers/sif-images/lumi-pytorch-rocm-6.0.3-python-3.12-pytorch-v2.3.1.sif"},
            "SIF at a LUMI path: lumi-pytorch-rocm-6.0.3-python-3.12-pytorch-v2.3.1.sif (origin unverified)",
        ),
    ],
)
def test_a_vendor_label_says_what_the_digest_shows(image, label):
    assert vendor_label(image) == label


@pytest.mark.parametrize(
    "image",
    [
        {"tag": "evil/rocm/pytorch:x"},
        {"tag": "rocm/pytorch-evil:x"},
        {"tag": "myregistry.example/rocm/pytorch:x", "repo_digests": [f"myregistry.example/rocm/pytorch@{PUBLISHED}"]},
        {"tag": "x:1", "repo_digests": [f"evil/rocm/pytorch@{PUBLISHED}", f"rocm/pytorch-evil@{PUBLISHED}"]},
        {"tag": "x:1", "repo_digests": [f"rocm/pytorch@{PUBLISHED}\n"]},
        {"tag": "rocm/pytorch:<b>x</b>"},
        {"tag": "/appl/local/containers/../../tmp/x.sif"},
        {"tag": "/home/u/appl/local/containers/x.sif"},
        {"tag": "envbuild/rocm:abc"},
        {"tag": None, "repo_digests": "rocm/pytorch@" + PUBLISHED},
        None,
        "rocm/pytorch:latest",
    ],
)
def test_nothing_else_passes_for_a_vendor_image(image):
    assert vendor_label(image) is None


def test_the_published_digests_cite_a_commit_of_amd_s_docs():
    data = tomllib.loads(AMD_IMAGES_FILE.read_text())
    for name, url in data["sources"].items():
        assert re.fullmatch(
            r"https://github\.com/ROCm/rocm-install-on-linux/blob/[0-9a-f]{40}/docs/reference/"
            r"docker-image-support-matrix\.rst",
            url,
        ), name
    published = amd_published()
    assert len(published) == len(data["rocm_pytorch"]) == 15  # every digest once
    assert {row["source"] for row in data["rocm_pytorch"]} == {"rocm6.1", "rocm6.2"}
    assert "latest" not in published.values()


def test_a_published_list_that_cites_no_source_is_refused(tmp_path):
    bad = tmp_path / "amd-images.toml"
    bad.write_text(
        f'[sources]\n"a" = "https://example.org"\n\n[[rocm_pytorch]]\ntag = "x"\ndigest = "{PUBLISHED}"\nsource = "b"\n'
    )
    with pytest.raises(ValueError, match="cite sources it does not list: b"):
        amd_published(bad)
