"""allowed_signers lines from hypothesis: options, patterns, certificates, whitespace, quotes.
Whatever the line, our parser either refuses it (AllowedSignersError naming the line) or binds one plain
principal to one plain key; a reserved principal is only ever bound to this project's own keys."""

from __future__ import annotations

import base64
import re

from hypothesis import given, settings, strategies as st

from builder.attest import allowed_signers
from builder.store.provenance import PROJECT_SIGNERS

ED25519 = base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + bytes(range(32))).decode()
CERT = base64.b64encode(b"\x00\x00\x00\x1cssh-ed25519-cert-v01@openssh.com" + bytes(40)).decode()
PRINCIPALS = st.one_of(
    st.sampled_from(
        [
            "alice",
            "envbuild-ci",
            "envbuild-h200",
            "*",
            "envbuild-*",
            "envbuild-c?",
            "!bob",
            "alice,envbuild-ci",
            '"envbuild-ci"',
            '" envbuild-ci,*"',
            ",alice",
            "alice@example.org",
            "a b",
            "ENVBUILD-CI",
            "envbuild-ci\u200b",
        ]
    ),
    st.text(alphabet='abc-*?!," \t@.', min_size=1, max_size=12),
)
OPTIONS = st.lists(
    st.sampled_from(
        [
            'namespaces="envbuild"',
            'namespaces="git"',
            'namespaces="envbuild,git"',
            "namespaces=envbuild",
            "cert-authority",
            'valid-after="20261201"',
            'valid-before="20300101Z"',
            'valid-after="2026"',
            "no-touch-required",
            'principals="envbuild-ci"',
            "verify-required",
            'namespaces="*"',
        ]
    ),
    max_size=4,
).map(",".join)
KEYS = st.sampled_from(
    [
        f"ssh-ed25519 {ED25519}",
        f"ssh-ed25519-cert-v01@openssh.com {CERT}",
        f"ssh-rsa {ED25519}",
        f"ssh-ed25519 {ED25519[:-4]}",
        "ssh-ed25519",
        f"ssh-ed25519 {ED25519} c",
    ]
)
SPACE = st.sampled_from([" ", "\t", "  ", " \t "])


@settings(max_examples=400, deadline=None)
@given(PRINCIPALS, OPTIONS, KEYS, SPACE, SPACE, st.sampled_from(["", " ", "\t", "#"]))
def test_any_line_is_refused_or_binds_one_plain_principal(principal, options, key, gap1, gap2, lead):
    line = lead + principal + (gap1 + options if options else "") + gap2 + key
    try:
        signer = allowed_signers.parse_line(line, 7)
    except allowed_signers.AllowedSignersError as exc:
        assert "line 7" in str(exc)
        return
    if signer is None:
        assert line.strip(" \t").startswith("#")
        return
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}", signer.principal)
    assert signer.principal == principal.strip() and signer.key_type == "ssh-ed25519"
    assert "cert-authority" not in options and "namespaces" in options and "envbuild" in options
    assert not re.search(r"no-touch|verify-required|principals=|valid-after=\"2026\"", options)
    assert signer.principal not in PROJECT_SIGNERS or signer.fingerprint in PROJECT_SIGNERS[signer.principal]
    assert signer.principal not in PROJECT_SIGNERS  # this test key is none of the project's


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(PRINCIPALS, OPTIONS, KEYS), min_size=1, max_size=4))
def test_a_whole_file_never_raises_anything_but_its_own_error(lines):
    text = "\n".join(f"{p} {o} {k}" for p, o, k in lines)
    try:
        signers = allowed_signers.parse(text)
    except allowed_signers.AllowedSignersError as exc:
        assert re.search(r"line \d+", str(exc))
        return
    assert len({s.principal for s in signers}) <= 1  # one key in these lines: one principal at most
