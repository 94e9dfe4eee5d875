"""The host's secret values (Hugging Face tokens from the environment and the token files) are removed from every log
envbuild keeps or publishes: from a stream however it is cut into chunks, from a log's tail where the cut fell inside
a token, and from a log copied through the bounded reader (never through a link)."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from builder.known_secrets import REPLACEMENT, Scrubber, copy_scrubbed, hf_token, known_secrets, scrub, scrub_tail

SECRETS = (b"hf_abcdefghijklmnopqrstuvwxyz012345", b"hf_shortish1")


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(st.one_of(st.binary(max_size=40), st.sampled_from(SECRETS)), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_a_stream_keeps_no_secret_however_it_is_cut(parts, cuts):
    data = b"".join(parts)
    scrubber, out, last = Scrubber(SECRETS), b"", 0
    for cut in sorted(set(cuts)) + [len(data)]:
        out += scrubber.feed(data[last:cut])
        last = max(last, cut)
    out += scrubber.flush()
    assert out == scrub(data, scrubber.secrets)
    assert all(secret not in out for secret in SECRETS)


def test_a_tail_cut_inside_a_token_keeps_none_of_it():
    log = b"start HF_TOKEN=" + SECRETS[0] + b" and more\n"
    cut = log.index(SECRETS[0]) + 10
    tail = scrub_tail(log[cut:], SECRETS)
    assert tail == REPLACEMENT + b" and more\n"
    assert scrub_tail(b"nothing secret here", SECRETS) == b"nothing secret here"


def test_the_host_s_tokens_are_known_and_short_values_are_not(tmp_path):
    home = tmp_path / "hf"
    home.mkdir()
    (home / "token").write_text("hf_fromTheTokenFile000\n")
    (home / "stored_tokens").write_text("[work]\nhf_token = hf_storedTokenValue111\n")
    env = {"HF_HOME": str(home), "HF_TOKEN": "hf_fromTheVariable222", "HUGGING_FACE_HUB_TOKEN": "short"}
    assert set(known_secrets(env)) == {b"hf_fromTheTokenFile000", b"hf_storedTokenValue111", b"hf_fromTheVariable222"}
    assert hf_token(env) == "hf_fromTheVariable222"
    assert hf_token({"HF_HOME": str(home)}) == "hf_fromTheTokenFile000"


def test_a_token_file_that_is_a_link_is_not_read(tmp_path):
    home = tmp_path / "hf"
    home.mkdir()
    (tmp_path / "elsewhere").write_text("hf_notReadThroughALink33")
    (home / "token").symlink_to(tmp_path / "elsewhere")
    assert known_secrets({"HF_HOME": str(home)}) == ()


def test_a_copied_log_is_scrubbed_and_a_link_or_a_large_one_is_not_copied(tmp_path):
    log = tmp_path / "container.log"
    log.write_bytes(b"x" * 3_000_000 + b"HF_TOKEN=" + SECRETS[0] + b"\n")
    assert copy_scrubbed(log, tmp_path / "kept.log", 4_000_000, SECRETS)
    kept = (tmp_path / "kept.log").read_bytes()
    assert SECRETS[0] not in kept and kept.endswith(b"HF_TOKEN=" + REPLACEMENT + b"\n")
    assert not copy_scrubbed(log, tmp_path / "small.log", 1000, SECRETS)
    (tmp_path / "zero.log").symlink_to("/dev/zero")
    assert not copy_scrubbed(tmp_path / "zero.log", tmp_path / "z.log", 1000, SECRETS)
    assert sorted(os.listdir(tmp_path)) == ["container.log", "kept.log", "zero.log"]  # nothing half-written
