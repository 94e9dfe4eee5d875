"""A check of a whole value (a hash, a digest, a commit, a name, a path) matches all of it: `fullmatch`, never a
pattern ending in `$`, which also matches before a final line end ("<40 hex>\\n" passed as a commit).

One test reads every regular expression literal in builder/ and workload/; the others hand each door that checks
a hash, digest, commit, name or path a valid value with a line end after it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from repo import REPO_ROOT

SHA64 = "e" * 64
WHEEL = "torch-2.5.1+rocm6.2-cp310-cp310-linux_x86_64.whl"
_CALLS = {"compile", "match", "search", "fullmatch", "findall", "finditer", "sub", "subn", "split"}


def _multiline(call: ast.Call) -> bool:
    """Whether the call's flags (any argument after the pattern) include re.M / re.MULTILINE."""
    flags = [*call.args[1:], *(keyword.value for keyword in call.keywords)]
    return any(isinstance(n, ast.Attribute) and n.attr in ("M", "MULTILINE") for f in flags for n in ast.walk(f))


def test_no_regular_expression_in_builder_or_workload_ends_in_a_dollar_without_multiline():
    """`$` matches before a final line end; `\\Z` or fullmatch does not. Multi-line patterns (re.M), which mean
    every line end, are the only ones left with `$`."""
    found = []
    for path in sorted([*(REPO_ROOT / "builder").rglob("*.py"), *(REPO_ROOT / "workload").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
                continue
            if node.func.attr not in _CALLS or ast.unparse(node.func.value) != "re":
                continue
            pattern = node.args[0]
            if isinstance(pattern, ast.Constant) and isinstance(pattern.value, (str, bytes)):
                text = pattern.value if isinstance(pattern.value, str) else pattern.value.decode()
                if text.endswith("$") and not text.endswith("\\$") and not _multiline(node):
                    found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno} {text[-40:]!r}")
    assert not found, "use fullmatch (or \\Z) for a check of a whole value:\n" + "\n".join(found)


def test_a_recorded_wheel_hash_with_a_line_end_is_refused(tmp_path):
    from builder.plan import wheel_hashes

    (tmp_path / wheel_hashes.FILE).write_text(f"[wheel]\n{json.dumps(WHEEL)} = {json.dumps(SHA64 + chr(10))}\n")
    with pytest.raises(ValueError, match="64-hex sha256"):
        wheel_hashes.read(tmp_path)
    (tmp_path / wheel_hashes.FILE).write_text(f"[wheel]\n{json.dumps(WHEEL + chr(10))} = {json.dumps(SHA64)}\n")
    with pytest.raises(ValueError, match="64-hex sha256"):
        wheel_hashes.read(tmp_path)


def test_an_index_page_s_wheel_name_with_a_line_end_is_not_taken():
    """A PEP 503 page whose wheel name ends in a quoted line end ("%0A"): nothing is recorded (the name once went
    into wheel-hashes.toml with its line end inside a TOML string, and the file no longer parsed)."""
    from builder.plan import recipes, wheel_hashes

    pinned = recipes.load()

    def page(name: str, digest: str) -> str:
        return f'<a href="{WHEEL}#sha256={digest}">{name}</a>'

    assert wheel_hashes.pinned_hashes(page(WHEEL, SHA64), pinned) == {WHEEL: SHA64}
    assert wheel_hashes.pinned_hashes(page(WHEEL.replace(".whl", ".whl%0A"), SHA64), pinned) == {}


def test_an_amd_or_lumi_name_with_a_line_end_is_no_vendor_image():
    from builder.plan.image_origin import vendor_label

    assert vendor_label({"tag": f"rocm/pytorch:latest@sha256:{SHA64}"})
    assert vendor_label({"tag": f"rocm/pytorch:latest@sha256:{SHA64}\n"}) is None
    assert vendor_label({"repo_digests": [f"rocm/pytorch@sha256:{SHA64}"]}).startswith("AMD image")
    assert vendor_label({"repo_digests": [f"rocm/pytorch@sha256:{SHA64}\n"]}) is None
    assert vendor_label({"tag": "/appl/local/containers/sif-images/lumi-pytorch.sif"})
    assert vendor_label({"tag": "/appl/local/containers/sif-images/lumi-pytorch.sif\n"}) is None


def test_paths_names_and_tokens_with_a_line_end_are_refused(tmp_path):
    from builder.engine import apptainer_build, container, slurm
    from builder.engine.apptainer import RunError

    with pytest.raises(RunError):
        container.resolve_model("google/gemma-2b\n")
    with pytest.raises(RunError):
        apptainer_build._plain(Path("/scratch/cell.sif\n"), "--apptainer")
    with pytest.raises(slurm.SlurmError):
        slurm.checked_path("/scratch/results\n", "--results-dir")
    with pytest.raises(slurm.SlurmError):
        slurm.load_site({"partition": "gpu\n"}, tmp_path / "none.toml")


def test_a_gpu_name_table_mapping_to_a_target_with_a_line_end_is_refused(tmp_path):
    from builder.plan import gpu_names

    path = tmp_path / "gpu-names.toml"
    path.write_text('[name]\n"MI250X" = "gfx90a\\n"\n')
    with pytest.raises(ValueError, match="gfx target"):
        gpu_names.names(path)
