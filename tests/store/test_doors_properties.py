"""Property tests of two doors: a site recipe overlay whose release holds any text in any field renders or is
refused (exit 2, the file and field named), and what renders holds no line a value started (no %setup or
other Apptainer section, no Dockerfile instruction that the packaged recipes do not make); a SIF record of any
bytes or any JSON is a record or a RunError, never another exception. The bounded reader's scans agree with
the parsers on what they let through."""

from __future__ import annotations

import json
import re
import tempfile
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builder import bounded_read
from builder.cli import main
from builder.engine.apptainer import RunError, read_sidecar
from builder.paths import file_sha256
from render_fixtures import SITE_CELL_RENDER
from repo import REPO_ROOT

PACKAGED = (REPO_ROOT / "recipes" / "rocm.toml").read_text()
START = PACKAGED.index('[release."6.2"]')
BLOCK = PACKAGED[START : PACKAGED.find("\n[", START + 1)].strip().replace('[release."6.2"]', '[release."6.2.9"]')
RELEASE = tomllib.loads(BLOCK)["release"]["6.2.9"]
FIELDS = sorted(RELEASE)
HOSTILE = [
    "\n%setup\n    touch /tmp/envbuild-pwned\n%post",
    "\r\nRUN id",
    "x\u2028y",
    "x\x85y",
    '"',
    "\\",
    "$(id)",
    "`id`",
    "${HOME}",
    "'",
    "rocm/dev-ubuntu-22.04:6.2",
    "6.2",
    "gfx90a",
    "a b",
    "%post",
    "\x00",
    "\t",
]
_values = st.one_of(
    st.text(max_size=40),
    st.sampled_from(HOSTILE),
    st.lists(st.sampled_from(HOSTILE), min_size=1, max_size=3).map("".join),
)
SECTIONS = re.compile(r"^%(\w+)", re.MULTILINE)
INSTRUCTIONS = re.compile(r"^(?!#)([A-Z]+) ", re.MULTILINE)


def _toml_value(value) -> str:
    return json.dumps(value, ensure_ascii=False).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _render(site: Path, out: Path, *extra: str):
    return CliRunner().invoke(
        main,
        ["--recipes", str(site), *SITE_CELL_RENDER, "-o", str(out), *extra],
    )


def _shape(out: Path) -> tuple[list[str], list[str]]:
    return (SECTIONS.findall((out / "cell.def").read_text()), INSTRUCTIONS.findall((out / "Dockerfile").read_text()))


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> dict[str, tuple[list[str], list[str]]]:
    """The shapes of the block's own renders: the wheel route, and the source route a changed field can lead to
    (a cell with no official wheel builds from source)."""
    site = tmp_path_factory.mktemp("site")
    (site / "rocm.toml").write_text(BLOCK + "\n")
    shapes = {}
    for route in ("wheel", "source"):
        out = tmp_path_factory.mktemp("out") / route
        assert _render(site, out, "--torch-source", route).exit_code == 0
        shapes[route] = _shape(out)
    return shapes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), value=_values, as_list=st.booleans())
def test_any_text_in_a_release_field_renders_one_line_or_is_refused(baseline, field, value, as_list):
    with tempfile.TemporaryDirectory() as scratch:
        site = Path(scratch) / "site"
        site.mkdir()
        fields = {**RELEASE, field: [value] if as_list or isinstance(RELEASE[field], list) else value}
        body = "\n".join(f"{k} = {_toml_value(v)}" for k, v in fields.items())
        (site / "rocm.toml").write_text(f'[release."6.2.9"]\n{body}\n', encoding="utf-8")
        out = Path(scratch) / "ctx"
        result = _render(site, out)
        assert result.exit_code in (0, 2), result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        if result.exit_code == 2:
            assert not out.exists()
            return
        sections, instructions = _shape(out)
        route = baseline[json.loads((out / "manifest.json").read_text())["torch"]["source"]]
        assert sections == route[0] or set(sections) <= set(route[0]) and "setup" not in (set(sections) - set(route[0]))
        assert sections.count("setup") == route[0].count("setup")
        assert set(instructions) <= set(route[1])
        for text in ((out / "cell.def").read_text(), (out / "Dockerfile").read_text()):
            assert "envbuild-pwned" not in text and "\u2028" not in text and "\x85" not in text


_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8))
_json = st.recursive(
    _scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None)
@given(
    content=st.one_of(
        st.binary(max_size=200),
        _json.map(lambda v: json.dumps(v).encode()),
        st.builds(lambda depth: b"[" * depth + b"]" * depth, st.integers(60, 5000)),
        _json.map(lambda v: json.dumps({"image": {"manifest": v}, "sha256": "x"}).encode()),
    )
)
def test_a_sif_record_of_any_content_is_a_record_or_a_run_error(content):
    with tempfile.TemporaryDirectory() as scratch:
        sif = Path(scratch) / "cell.sif"
        sif.write_bytes(b"SIF")
        (Path(scratch) / "cell.sif.json").write_bytes(content)
        try:
            record = read_sidecar(sif)
        except RunError as exc:
            assert "cell.sif.json" in str(exc) or "cell.sif" in str(exc)
        else:
            assert isinstance(record["image"]["manifest"], dict) and record["sha256"] == file_sha256(sif)


@settings(max_examples=200, deadline=None)
@given(value=_json)
def test_the_json_scan_lets_through_what_the_parser_reads_within_the_caps(value):
    raw = json.dumps(value).encode()
    depth = _depth(value)
    if depth <= bounded_read.MAX_DEPTH:
        bounded_read.check_json(raw, max_values=10**6)
    with pytest.raises(bounded_read.BoundedReadError):
        bounded_read.check_json(
            b"[" * (bounded_read.MAX_DEPTH + 1) + raw + b"]" * (bounded_read.MAX_DEPTH + 1), max_values=10**6
        )


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.sampled_from('[]{}".,\\ab\n'), max_size=40))
def test_brackets_inside_strings_do_not_count(text):
    raw = json.dumps({"k": text, "l": [text] * 3}).encode()
    bounded_read.check_json(raw, max_depth=2, max_values=6)


def test_the_toml_scan_lets_the_packaged_recipes_through_and_stops_deep_or_long_keys():
    for path in (REPO_ROOT / "recipes").rglob("*.toml"):
        bounded_read.check_toml(path.read_text())
    for text in (
        "a = " + "[" * 65 + "]" * 65,
        "a = " + "{b = " * 65 + "1" + "}" * 65,
        ".".join("a" * 17) + " = 1",
        "[" + ".".join("a" * 17) + "]",
    ):
        with pytest.raises(bounded_read.BoundedReadError):
            bounded_read.check_toml(text)
    bounded_read.check_toml('a = "' + "[" * 100 + "\"\nb = '" + "." * 100 + "'\n# " + "{" * 100)


def _depth(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


#: Text that a scan which misreads TOML's lexical rules takes for a string or comment boundary, or for nesting.
_TRICKY = st.lists(st.sampled_from(["'", "''", "'''", '"', '""', '"""', "#", "[", "]", "{", "}", ".", "\\", "a", " "]))


def _string(kind: str, parts: list[str]) -> str:
    """`parts` (no line end) as a TOML string of `kind`, escaped as that kind needs."""
    text = "".join(parts)
    if kind == "basic":
        return json.dumps(text)
    if kind == "multi-line basic":
        return '"""' + text.replace("\\", "\\\\").replace('"', '\\"') + '"""'
    if kind == "literal":
        return "'" + text.replace("'", "") + "'"
    return "'''" + text.replace("'''", "") + "\n'''"  # multi-line literal: a closing ''' on its own line


_strings = st.builds(_string, st.sampled_from(["basic", "multi-line basic", "literal", "multi-line literal"]), _TRICKY)
_comments = st.builds(lambda parts: " # " + "".join(parts) + "\n", _TRICKY)
_toml_values = st.recursive(
    st.one_of(st.integers(-9, 9).map(str), _strings),
    lambda inner: st.one_of(
        st.builds(
            lambda items, gaps: "[" + "".join(f"{gap}{item}," for item, gap in zip(items, gaps)) + "\n]",
            st.lists(inner, max_size=3),
            st.lists(st.one_of(st.just("\n"), _comments), min_size=3, max_size=3),
        ),
        st.builds(lambda items: "{" + ", ".join(f"k{n} = {v}" for n, v in enumerate(items)) + "}", st.lists(inner)),
    ),
    max_leaves=12,
)


def _nesting(value) -> int:
    if isinstance(value, (list, dict)):
        return 1 + max(map(_nesting, value.values() if isinstance(value, dict) else value), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(value=_toml_values, before=_comments, after=_comments, limit=st.integers(0, 6))
def test_the_toml_scan_sees_the_nesting_the_parser_sees(value, before, after, limit):
    """Strings of all four kinds and comments holding quotes, brackets and backslashes, around and inside arrays:
    the scan refuses exactly the documents whose parsed value nests deeper than the limit."""
    text = f"{before}x = {value}{after}"
    depth = _nesting(tomllib.loads(text)["x"])
    if depth > limit:
        with pytest.raises(bounded_read.BoundedReadError, match=f"nested {depth} deep"):
            bounded_read.check_toml(text, max_depth=limit)
    else:
        bounded_read.check_toml(text, max_depth=limit)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from(["x = ", "[", "]", ",", "\n", "#", "'", "'''", '"', '"""', "\\", "{", "}", "1"])))
def test_what_the_toml_scan_lets_through_never_nests_deeper_in_the_parser(parts):
    """Any text: the scan either refuses it or the parser's value nests no deeper than the limit (or the parser
    refuses it), so a text the scan passes cannot take the parser deeper than it was told."""
    text = "".join(parts)
    try:
        bounded_read.check_toml(text, max_depth=2)
    except bounded_read.BoundedReadError:
        return
    try:
        value = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return
    assert _nesting(value.get("x")) <= 2


_TEMPLATE_PARTS = ["{suffix}", "{", "}", "suffix", "{version}", ":>9", "!r", ".__class__", "[0]", "rocm", "6.2", "/"]


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.sampled_from(_TEMPLATE_PARTS)),
    url=st.booleans(),
    suffix=st.sampled_from(["rocm6.2", "cu130", "cpu", ""]),
)
def test_a_flavor_template_is_refused_or_filled_by_plain_substitution(parts, url, suffix):
    """Any text in a flavor's wheel index or local version: the recipe grammar refuses it, or its only braces are
    {suffix} and filling it replaces exactly those (no format spec, attribute, index or conversion is run)."""
    from pydantic import TypeAdapter, ValidationError

    from builder.plan import placeholders
    from builder.plan import recipe_grammar as g

    text = ("https://download.pytorch.org/whl/" if url else "") + "".join(parts)
    try:
        TypeAdapter(g.WheelIndex if url else g.LocalVersion).validate_python(text)
    except ValidationError:
        return
    filled = placeholders.fill(text, suffix=suffix)
    assert filled == text.replace("{suffix}", suffix)
    assert "{" not in filled and "}" not in filled
    assert not url or g.is_url(filled)
