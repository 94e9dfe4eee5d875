"""The host's side of measuring an image envbuild did not build, without an engine: the run's log is a file envbuild
creates (a link placed there is removed, never written through), bounded, scrubbed and read back only from the
stream; a probe's output is bounded; a SIF gets none of this environment's Apptainer settings or tokens; a foreign
image gets the Hub's models but not its token; the GPUs the host sees come from the driver's own files; a probe's
text in a message is escaped."""

from __future__ import annotations

import pytest

from builder.engine import foreign
from builder.engine.apptainer import check_sif_network
from builder.engine.container import HF_MOUNT, RunError, input_mounts
from builder.engine.doctor import HostView, nvidia_gpus
from builder.engine.foreign_sif import apptainer_environment
from builder.engine.run_output import ProbeOutput, RunLog
from builder.slug import escaped

SECRET = b"hf_aSecretTokenValue0123456789"


def test_a_log_replaces_a_link_placed_before_it_and_never_writes_through_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "container.log").symlink_to(victim)
    with RunLog(tmp_path / "container.log", limit=1000, secrets=(SECRET,)) as log:
        assert log.feed(b"hello " + SECRET + b"\n") + log.finish() == "hello [secret removed]\n"
    assert victim.read_text() == "keep"
    assert not (tmp_path / "container.log").is_symlink()
    assert (tmp_path / "container.log").read_bytes() == b"hello [secret removed]\n"


def test_a_log_stops_at_its_limit_and_says_so(tmp_path):
    log = RunLog(tmp_path / "container.log", limit=100, secrets=())
    assert log.feed(b"a" * 60) == "a" * 60
    assert log.feed(b"b" * 60) is None and log.over
    assert log.feed(b"c" * 60) is None
    log.close()
    text = (tmp_path / "container.log").read_text()
    assert text.startswith("a" * 60 + "b" * 40) and "output past 100 bytes" in text and "ccc" not in text


def test_a_log_keeps_the_lines_it_watches_from_the_stream_and_escapes_what_it_shows(tmp_path):
    log = RunLog(tmp_path / "container.log", secrets=())
    log.watch_lines(lambda line: line.startswith("[workload] bad input: "))
    shown = log.feed(b"noise\n[workload] bad in") + log.feed(b"put: no such file\n\x1b[2Jdone \xe2\x82")
    shown += log.feed(b"\xac\n") + log.finish()
    assert log.lines_seen == [b"[workload] bad input: no such file"]
    assert shown == "noise\n[workload] bad input: no such file\n\\x1b[2Jdone \u20ac\n"  # a split character kept whole
    log.close()


def test_a_probe_s_output_is_bounded():
    output = ProbeOutput(limit=10)
    assert output.add(b"12345") and not output.add(b"678901") and output.over
    assert output.text() == "1234567890"


def test_a_probe_s_text_in_a_message_is_escaped():
    answer = {
        "python": "3.11.2",
        "machine": "x86_64",
        "libc": ["glibc", "2.36"],
        "executable": "/usr/bin/python3\x1b]8;;https://evil.example/\x07",
        "distributions": {},
        "torch": None,
        "torch_error": "ImportError: \x1b[2J\u202egnp.exe",
        "rocm_release": None,
    }
    import json

    with pytest.raises(foreign.ForeignError) as raised:
        foreign.parse_probe("ENVBUILD-PROBE " + json.dumps(answer), "image x")
    message = str(raised.value)
    assert "\x1b" not in message and "\u202e" not in message
    assert "\\x1b]8;;https://evil.example/\\x07" in message and "\\x1b[2J\\u202egnp.exe" in message
    with pytest.raises(foreign.ForeignError) as raised:
        foreign.parse_probe("no answer \x1b[2J", "image x")
    assert "\x1b" not in str(raised.value)
    assert escaped("a\tb\nc\rd", lines=True) == "a\tb\nc\\x0dd" and escaped("a\nb") == "a\\x0ab"


def test_a_sif_gets_none_of_this_environment_s_apptainer_settings_or_tokens(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SECRET.decode())
    monkeypatch.setenv("APPTAINERENV_HF_TOKEN", SECRET.decode())
    monkeypatch.setenv("SINGULARITYENV_X", "1")
    monkeypatch.setenv("APPTAINER_BIND", "/:/host")
    monkeypatch.setenv("SINGULARITY_BINDPATH", "/:/host")
    monkeypatch.setenv("APPTAINER_CACHEDIR", "/var/cache/apptainer")
    env = apptainer_environment(None)
    assert not {
        "HF_TOKEN",
        "APPTAINERENV_HF_TOKEN",
        "SINGULARITYENV_X",
        "APPTAINER_BIND",
        "SINGULARITY_BINDPATH",
    } & set(env)
    assert env["APPTAINER_CACHEDIR"] == "/var/cache/apptainer" and env["PATH"]
    assert apptainer_environment("hf_given")["APPTAINERENV_HF_TOKEN"] == "hf_given"


@pytest.mark.parametrize("network", ["bridge", "my-net", "a b", "container:x"])
def test_a_sif_takes_host_or_none_as_its_network(network):
    assert check_sif_network(None) is None and check_sif_network("host") == "host"
    assert not foreign.online("none") and not foreign.online(None) and foreign.online("host")
    with pytest.raises(RunError, match="shares this host's network"):
        check_sif_network(network)


def test_a_foreign_image_gets_the_hub_s_models_but_not_its_token(tmp_path, monkeypatch):
    hf = tmp_path / "hf"
    (hf / "hub").mkdir(parents=True)
    (hf / "token").write_text(SECRET.decode())
    monkeypatch.setenv("HF_HOME", str(hf))
    monkeypatch.setenv("HF_TOKEN", SECRET.decode())
    mounts, env, model, _ = input_mounts(tmp_path / "out", "google/gemma-2b", None, None, hf_token=False)
    assert "HF_TOKEN" not in env and env["HF_HOME"] == HF_MOUNT and model == "google/gemma-2b"
    assert [(m["Target"], m["Source"], m["ReadOnly"]) for m in mounts[1:]] == [
        (f"{HF_MOUNT}/hub", str(hf / "hub"), True)
    ]
    mounts, env, _, _ = input_mounts(tmp_path / "out", "google/gemma-2b", None, None, hf_token=True)
    assert env["HF_TOKEN"] == SECRET.decode() and mounts[1]["Source"] == str(hf)


def test_the_nvidia_gpus_a_host_sees_come_from_the_driver(tmp_path):
    gpus = tmp_path / "proc/driver/nvidia/gpus"
    for bus, model in (("0000:19:00.0", "NVIDIA H100 80GB HBM3"), ("0000:3b:00.0", None)):
        (gpus / bus).mkdir(parents=True)
        lines = [f"Model: \t\t {model}"] if model else []
        (gpus / bus / "information").write_text("\n".join([*lines, "IRQ:   123", "Bus Location: " + bus]) + "\n")
    assert nvidia_gpus(HostView(root=tmp_path)) == ["NVIDIA H100 80GB HBM3", "unknown model"]
    assert nvidia_gpus(HostView(root=tmp_path / "none")) == []


@pytest.mark.parametrize("network", ["a b", "container:x", "-x", "n" * 200])
def test_a_network_outside_the_grammar_is_exit_2_before_anything_runs(tmp_path, network):
    from click.testing import CliRunner

    from builder.cli import main

    out = tmp_path / "run"
    ran = CliRunner().invoke(
        main, ["run", "workload", "--local", "--network", network, "--out", str(out), "--no-record"]
    )
    assert ran.exit_code == 2 and "--network" in ran.output and not out.exists()
