"""Property test of the import door: a result mutated any way goes through import -> list -> show -> diff ->
report -> publish. Every command works or exits 2 with a message; never a traceback, never a page or data
file that a browser's JSON.parse would refuse. EXAMPLES examples per CI run (about 45 s on a shared 2-core machine)."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from builder.cli import main
from matrix_fixtures import cpu_result, make_result
from site_files import compare_scripts, strict_json

EXAMPLES = 80
ROCM_KEY = "rocm6.2-torch2.4-gfx90a-py3.10"
CPU_KEY = "cpu-torch2.13-py3.11"

_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            "\u202eevil",
            "a\x00b",
            "\x1b[2J",
            "<script>x</script>",
            "../../etc/passwd",
            "9999-12-31T23:59:59Z",
            "x" * 5000,
        ]
    ),
)
_number = st.one_of(st.integers(), st.floats(), st.sampled_from([1e308, -1e308, float("nan"), float("inf"), 2**70]))
_leaf = st.one_of(st.none(), st.booleans(), _number, _text)
_json = st.recursive(
    _leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=12,
)
_paths = st.sampled_from(
    [
        "config",
        "config.preset",
        "metrics",
        "metrics.samples_per_s",
        "metrics.mfu",
        "metrics.curves",
        "metrics.curves.train_loss",
        "metrics.curves.train_loss.0",
        "metrics.eval_after",
        "metrics.eval_after.accuracy",
        "metrics.steps",
        "hardware",
        "hardware.gpu_count",
        "hardware.gpu_name",
        "finished_at",
        "started_at",
        "run_id",
        "status",
        "error_class",
        "error",
        "probes",
        "probes.0",
        "probes.0.values",
        "probes.0.name",
        "probes.0.status",
        "versions",
        "versions.torch",
        "versions.python",
        "image",
        "image.tag",
        "image.manifest",
        "host",
        "host.os",
        "command",
        "wall_time_s",
        "dataset",
        "model",
    ]
)
# Values the schema may accept where they land (so that most examples reach every command), and anything.
_plausible = st.one_of(
    st.none(),
    st.floats(0, 1e6),
    st.integers(0, 10**6),
    st.text(max_size=20),
    st.sampled_from(["\u202eevil", "\x1b[2J<b>", "2026-11-30T10:00:00Z", "pass", "fail"]),
    st.lists(st.tuples(st.integers(0, 100), st.one_of(st.none(), st.floats(0, 10))).map(list), max_size=5),
    st.dictionaries(
        st.sampled_from(["accuracy", "loss", "train_loss", "n", "preset"]),
        st.one_of(st.floats(0, 1), st.text(max_size=5)),
        max_size=3,
    ),
)
_mutation = st.lists(st.tuples(_paths, st.one_of(_plausible, _plausible, _json)), min_size=1, max_size=3)


def _set(result: dict, path: str, value) -> None:
    """Set the dotted `path` where it exists (an earlier mutation may have replaced a parent)."""
    *parents, last = path.split(".")
    node = result
    for part in [*parents, None]:
        key = part if part is not None else last
        if isinstance(node, list) and key.isdigit() and int(key) < len(node):
            pass
        elif not isinstance(node, dict):
            return
        if part is None:
            node[int(key) if isinstance(node, list) else key] = value
            return
        node = node[int(key)] if isinstance(node, list) else node.get(key)


def _ok(result, *codes: int) -> None:
    """Exit code among `codes`, and no traceback (CliRunner catches what escaped: `exception` not SystemExit)."""
    assert result.exit_code in codes, (result.exit_code, result.output[-2000:])
    if result.exception is not None:
        assert isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 2:
        assert "Error" in result.output and "Traceback" not in result.output


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutation=_mutation, seed_cpu=st.booleans())
def test_any_mutated_result_works_or_is_refused_cleanly_in_every_command(mutation, seed_cpu):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        db = tmp / "m.db"
        base = cpu_result() if seed_cpu else make_result()
        other = make_result() if seed_cpu else cpu_result()
        for path, value in mutation:
            _set(base, path, value)
        src = tmp / "in" / "result.json"
        src.parent.mkdir()
        try:
            src.write_text(json.dumps(base))
        except (ValueError, RecursionError):
            event("not JSON-writable")
            return  # not JSON-writable at all (e.g. a surrogate): never reaches a file
        (tmp / "other.json").write_text(json.dumps(other))
        assert _run("matrix", "import", tmp / "other.json", "--db", db).exit_code == 0
        imported = _run("matrix", "import", src, "--db", db)
        _ok(imported, 0, 2)
        why = " " + imported.output.split("docs/result-schema.md: ")[-1][:50] if imported.exit_code else ""
        event(f"import exit {imported.exit_code}" + why)
        listed = _run("matrix", "list", "--json", "--db", db)
        _ok(listed, 0)
        keys = [c["key"] for c in strict_json(listed.stdout)]
        for key in keys:
            _ok(_run("matrix", "show", key, "--db", db), 0)
            _ok(_run("matrix", "show", key, "--json", "--db", db), 0)
        if len(keys) > 1:
            _ok(_run("matrix", "diff", keys[0], keys[1], "--db", db), 0)
            _ok(_run("matrix", "diff", keys[0], keys[1], "--json", "--db", db), 0)
        _ok(_run("matrix", "check", "--db", db), 0)
        site = tmp / "site"
        report = _run("report", "-o", site, "--db", db, "--no-recipes")
        _ok(report, 0)
        strict_json((site / "data.json").read_text())
        for data in (site / "data").glob("*.json"):
            strict_json(data.read_text())
        compare_scripts(site)  # each cell's profiles, strict JSON in its own compare/<slug>.js
        for blob in re.findall(
            r'<script type="application/json"[^>]*>(.*?)</script>', (site / "compare.html").read_text(), re.S
        ):
            strict_json(blob)
        for page in site.rglob("*.html"):
            text = page.read_text()
            assert "\u202e" not in text and "\x00" not in text and "\x1b" not in text, page
            assert "<script>x</script>" not in text, page
            assert max(len(line) for line in text.splitlines() or [""]) < 200_000, page
        published = _run("matrix", "publish", src, "--name", "p", "-o", tmp / "results")
        _ok(published, 0, 2)
        assert (imported.exit_code == 0) == (published.exit_code == 0), (imported.output, published.output)
