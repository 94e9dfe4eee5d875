"""A build record's cell is recomputed from its request and context hash with our own recipes: the hash either
matches a context these recipes render, naming the cell, or the record names no cell here."""

from __future__ import annotations

import pytest

from builder.plan.context_identity import ContextNotRecomputed, recompute, request_of, wheelhouse_of
from builder.paths import RECIPES_DIR
from builder.plan.recipes import load
from builder.plan.render import StaticFiles, context_files
from builder.plan.resolve import Request, resolve

WHEEL = "wheelhouse/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"


def _manifest(wheelhouse=None, **request) -> dict:
    _, manifest = context_files(resolve(Request(**request)), StaticFiles.read(), wheelhouse)
    return manifest


@pytest.mark.parametrize(
    "request_, key",
    [
        ({"flavor": "cpu", "torch": "2.13"}, "cpu-torch2.13-py3.11"),
        ({"flavor": "cpu", "torch": "2.13", "torch_source": "wheel"}, "cpu-torch2.13-py3.11"),
        ({"flavor": "cpu", "torch": "2.13", "base_image": "envbuild-local/debian:bookworm"}, "cpu-torch2.13-py3.11"),
        ({"accel_version": "6.2", "torch": "2.4"}, "rocm6.2-torch2.4-gfx90a-py3.10"),
        ({"accel_version": "6.2", "torch": "2.5", "torch_source": "source"}, "rocm6.2-torch2.5-gfx90a-py3.10"),
        ({"accel_version": "6.2", "torch": "2.5", "arch": "MI300X"}, "rocm6.2-torch2.5-gfx942-py3.10"),
    ],
)
def test_the_context_of_a_request_recomputes_to_its_cell(request_, key):
    """Asked for or left to the recipe (torch source, base image), the manifest's request finds its context again."""
    manifest = _manifest(**request_)
    assert recompute(request_of(manifest), wheelhouse_of(manifest), manifest["context_hash"]).key == key


def test_the_wheelhouse_is_part_of_the_context():
    manifest = _manifest({WHEEL: "a" * 64}, flavor="cpu", torch="2.13")
    assert wheelhouse_of(manifest) == {WHEEL: "a" * 64}
    assert recompute(request_of(manifest), {WHEEL: "a" * 64}, manifest["context_hash"]).key == "cpu-torch2.13-py3.11"
    with pytest.raises(ContextNotRecomputed, match="not the record's"):
        recompute(request_of(manifest), {WHEEL: "b" * 64}, manifest["context_hash"])
    with pytest.raises(ContextNotRecomputed, match="not the record's"):
        recompute(request_of(manifest), {}, manifest["context_hash"])


def test_another_cells_hash_or_an_unknown_request_names_no_cell():
    cpu, rocm = _manifest(flavor="cpu", torch="2.13"), _manifest(accel_version="6.2", torch="2.4")
    with pytest.raises(ContextNotRecomputed, match=r"render rocm6\.2-torch2\.4-gfx90a-py3\.10 .* not the record's"):
        recompute(request_of(rocm), {}, cpu["context_hash"])
    with pytest.raises(ContextNotRecomputed, match="cannot render its request"):
        recompute({**request_of(cpu), "torch": "1.0"}, {}, cpu["context_hash"])
    with pytest.raises(ContextNotRecomputed, match="cannot render its request"):
        recompute({**request_of(cpu), "shell": "x"}, {}, cpu["context_hash"])


def test_other_recipes_render_another_context(tmp_path):
    """A site's recipe folder that changes a pin of the cell (its Python PPA, a build argument): the record built
    before names no cell under it, and still does under the packaged recipes."""
    manifest = _manifest(flavor="cpu", torch="2.13")
    site = tmp_path / "site"
    site.mkdir()
    packaged = (RECIPES_DIR / "cpu.toml").read_text()
    assert 'python_ppa = ""' in packaged
    (site / "cpu.toml").write_text(packaged.replace('python_ppa = ""', 'python_ppa = "ppa:site/python"'))
    with pytest.raises(ContextNotRecomputed, match="other recipes or another envbuild version"):
        recompute(request_of(manifest), {}, manifest["context_hash"], load(site=site))
    assert recompute(request_of(manifest), {}, manifest["context_hash"]).key == "cpu-torch2.13-py3.11"
