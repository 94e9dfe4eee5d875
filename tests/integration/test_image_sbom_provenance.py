"""On the real engine: the cpu cell built with `envbuild image --sign KEY` writes an SBOM that lists the image's real
packages and a signed SLSA provenance statement that `envbuild matrix verify` checks; a changed input changes the
provenance, and a tampered statement, SBOM or context fails verification.

One build of the cpu cell (`--force`; BuildKit's cache makes it take seconds once the module of
test_build_cpu_cell.py has built it). That the cell's image and a no-cache rebuild give identical SBOMs is
checked by test_reproducible_cpu_cell.py, on the two images it compares anyway.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from builder.cli import main
from builder.paths import BUILD_RECORD, PROVENANCE_ENVELOPE, PROVENANCE_FILE, SBOM_FILE
from tests.build_record_fixtures import make_key, signer_line
from tests.integration.test_build_cpu_cell import CA, cpu_cell_command
from shared_builds import one_build_at_a_time

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def signed_build(tmp_path_factory, local_base):
    """(work dir, image tag, attempt dir, allowed_signers file, key) of the cpu cell built with --sign."""
    work = tmp_path_factory.mktemp("sbom-cell")
    key = make_key(work / "builder_key", "builder")
    allowed = work / "allowed_signers"
    allowed.write_text(signer_line("builder@example.org", key))
    command = cpu_cell_command(local_base, work, "--db", str(work / "m.db"), "--force", "--sign", str(key))
    with one_build_at_a_time(tmp_path_factory, "cpu-cell"):
        result = CliRunner().invoke(main, command)
    assert result.exit_code == 0, result.output
    tag = result.stdout.strip().splitlines()[-1]
    (attempt,) = (work / "envbuild-attempts").iterdir()
    return work, tag, attempt, allowed, key


def _verify(allowed: Path, *paths) -> tuple[int, str]:
    done = CliRunner().invoke(main, ["matrix", "verify", "--allowed-signers", str(allowed), *map(str, paths)])
    return done.exit_code, done.output


def _run(docker_engine, tag: str, argv: list[str]) -> str:
    return docker_engine.containers.run(tag, argv, entrypoint=[], remove=True, network_disabled=True).decode()


def test_the_sbom_lists_the_images_real_packages(signed_build, docker_engine):
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    work, tag, attempt, _, _ = signed_build
    raw = (attempt / SBOM_FILE).read_bytes()
    assert raw == (work / f"ctx.{SBOM_FILE}").read_bytes()  # the same file beside the context
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(raw.decode()) is None  # CycloneDX's own schema
    sbom = json.loads(raw)
    by_source: dict[str, set] = {}
    for component in sbom["components"]:
        source = {p["name"]: p["value"] for p in component.get("properties", [])}["envbuild:source"]
        by_source.setdefault(source, set()).add((component["name"], component.get("version")))
    # what dpkg -l and pip list say inside the image
    dpkg = {
        (fields[1], fields[2])
        for line in _run(docker_engine, tag, ["dpkg", "-l"]).splitlines()
        if (fields := line.split()) and fields[0] == "ii"
    }
    pip = json.loads(_run(docker_engine, tag, ["python", "-m", "pip", "list", "--format=json"]))
    dpkg_names = {(name.split(":")[0], version) for name, version in dpkg}  # dpkg -l shows libfoo:amd64
    assert by_source["dpkg"] == dpkg_names and len(dpkg_names) > 80
    assert {(p["name"].lower(), p["version"]) for p in pip} == {(n.lower(), v) for n, v in by_source["python"]}
    print(f"SBOM: {len(sbom['components'])} components, {len(dpkg_names)} dpkg, {len(pip)} pip, {len(raw)} bytes")
    # what the manifest pinned: the base by the digest the build used, torch's wheel by its sha256, the locks
    manifest = json.loads((work / "ctx" / "manifest.json").read_text())
    base = next(c for c in sbom["components"] if c["bom-ref"].startswith("pinned:base-image:"))
    assert base["version"] == docker_engine.images.get(manifest["base_image"]).id
    torch = next(c for c in sbom["components"] if c["name"] == "torch")
    hashes = {h["content"] for ref in torch["externalReferences"] for h in ref.get("hashes", [])}
    wheels = {d for p, d in manifest["files"].items() if p.startswith("wheelhouse/torch-")}
    assert hashes == (wheels or set(manifest["torch"]["wheel_hashes"].values()))
    locks = {
        c["name"]: c["hashes"][0]["content"] for c in sbom["components"] if c["bom-ref"].startswith("pinned:lock:")
    }
    assert locks["requirements.lock"] == manifest["files"]["requirements.lock"]
    assert locks[manifest["lock"]["file"]] == manifest["lock"]["sha256"]
    assert sbom["metadata"]["component"]["version"] == manifest["image_tag"].rsplit(":", 1)[1]
    assert "timestamp" not in sbom["metadata"]


def test_the_provenance_verifies_and_the_record_links_it(signed_build, docker_engine):
    work, tag, attempt, allowed, _ = signed_build
    code, output = _verify(allowed, attempt / PROVENANCE_ENVELOPE)
    assert code == 0, output
    assert "provenance of a build of cpu-torch2.13-py3.11, its context recomputed" in output
    assert "provenance.json, sbom.cdx.json, build-record.json" in output and " context files" in output
    statement = json.loads((attempt / PROVENANCE_FILE).read_bytes())
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"][0]["digest"]["sha256"] == docker_engine.images.get(tag).id.removeprefix("sha256:")
    record = json.loads((attempt / BUILD_RECORD).read_text())
    assert record["provenance"]["sha256"] == hashlib.sha256((attempt / PROVENANCE_FILE).read_bytes()).hexdigest()
    assert record["sbom"]["sha256"] == hashlib.sha256((attempt / SBOM_FILE).read_bytes()).hexdigest()
    dependencies = {d["name"]: d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}
    assert (
        dependencies["context/Dockerfile"]["digest"]["sha256"]
        == hashlib.sha256((work / "ctx" / "Dockerfile").read_bytes()).hexdigest()
    )
    # a contributed build record carries them: publish --sign, then verify the published folder
    published = CliRunner().invoke(
        main,
        ["matrix", "publish", str(attempt / BUILD_RECORD), "--name", "sbom-test", "-o", str(work / "results")]
        + ["--sign", str(signed_build[4]), "--command", "envbuild image --flavor cpu --torch 2.13"],
    )
    assert published.exit_code == 0, published.output
    folder = work / "results" / "cpu-torch2.13-py3.11" / "sbom-test"
    assert {p.name for p in folder.iterdir()} >= {SBOM_FILE, PROVENANCE_FILE, PROVENANCE_ENVELOPE}
    code, output = _verify(allowed, folder)
    assert code == 0 and "linked and checked: provenance.intoto.jsonl, provenance.json, sbom.cdx.json" in output, output


def _tampered(attempt: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "attempt"
    shutil.copytree(attempt, copy)
    return copy


def test_a_tampered_statement_fails_verification(signed_build, tmp_path):
    _, _, attempt, allowed, _ = signed_build
    # the statement beside the envelope edited: not the signed one
    copy = _tampered(attempt, tmp_path / "a")
    text = (copy / PROVENANCE_FILE).read_text()
    (copy / PROVENANCE_FILE).write_text(text.replace('"no_cache":false', '"no_cache":true'))
    code, output = _verify(allowed, copy / PROVENANCE_ENVELOPE)
    assert code == 1 and "[provenance] provenance.json is not the statement" in output, output
    # the envelope's payload edited (a dependency's digest): the signature no longer matches
    copy = _tampered(attempt, tmp_path / "b")
    envelope = json.loads((copy / PROVENANCE_ENVELOPE).read_text())
    statement = base64.b64decode(envelope["payload"]).replace(b'"network":"host"', b'"network":null')
    envelope["payload"] = base64.b64encode(statement).decode()
    (copy / PROVENANCE_ENVELOPE).write_text(json.dumps(envelope) + "\n")
    (copy / PROVENANCE_FILE).write_bytes(statement)
    code, output = _verify(allowed, copy / PROVENANCE_ENVELOPE)
    assert code == 1 and "[signature]" in output, output
    # the SBOM edited, and a context file changed after the build
    copy = _tampered(attempt, tmp_path / "c")
    (copy / SBOM_FILE).write_text((copy / SBOM_FILE).read_text().replace('"2.4.6"', '"2.4.7"', 1))
    code, output = _verify(allowed, copy / PROVENANCE_ENVELOPE)
    assert code == 1 and "[sbom]" in output, output
    copy = _tampered(attempt, tmp_path / "d")
    with open(copy / "context" / "requirements.lock", "a") as handle:
        handle.write("# edited\n")
    code, output = _verify(allowed, copy / PROVENANCE_ENVELOPE)
    assert code == 1 and "[provenance]" in output and "requirements.lock" in output, output
    # a key that is not in allowed_signers
    other = tmp_path / "other_signers"
    other.write_text(signer_line("someone@example.org", make_key(tmp_path / "other", "other")))
    code, output = _verify(other, attempt / PROVENANCE_ENVELOPE)
    assert code == 1 and "[signer]" in output, output


def test_a_changed_input_changes_the_provenance(signed_build, tmp_path, docker_engine):
    """The same context with one input changed (a LABEL line added to its Dockerfile; every layer comes from the
    cache): the provenance names the new Dockerfile and the new image, nothing else of the inputs changes, and its
    context files are no longer what the recipes render for the cell, which verification says."""
    from builder.engine.build import BuildOptions, build_image
    from builder.workflows import build, build_evidence

    work, _, attempt, allowed, key = signed_build
    ctx = tmp_path / "ctx"
    shutil.copytree(work / "ctx", ctx)
    with open(ctx / "Dockerfile", "a") as handle:
        handle.write('LABEL org.envbuild.test="changed input"\n')
    tag = "envbuild-test/sbom-changed-input:1"
    context = build.existing(ctx)
    wheels = work / "wheels"
    options = BuildOptions(network="host", ca_cert=CA, force=True, wheelhouse=wheels if wheels.is_dir() else None)
    try:
        outcome = build_image(ctx, tag, options, log_path=tmp_path / "build.log", manifest=context.manifest)
        described = build_evidence.describe(context, outcome, options, None, key)
        assert described.problem is None and described.signed_by
        image_id = docker_engine.images.get(tag).id
    finally:
        try:
            docker_engine.images.remove(tag, force=True)
        except Exception:  # noqa: BLE001 - not built
            pass
    before = json.loads((attempt / PROVENANCE_FILE).read_bytes())
    after = json.loads((tmp_path / f"ctx.{PROVENANCE_FILE}").read_bytes())
    deps = [
        {d["name"]: d.get("digest") for d in s["predicate"]["buildDefinition"]["resolvedDependencies"]}
        for s in (before, after)
    ]
    assert sorted(n for n in deps[0].keys() | deps[1].keys() if deps[0].get(n) != deps[1].get(n)) == [
        "context/Dockerfile"
    ]
    assert after["subject"] != before["subject"]
    assert after["subject"][0]["digest"]["sha256"] == image_id.removeprefix("sha256:")
    # checked in a folder of its own (beside the context the files are named <context>.<name>)
    folder = tmp_path / "check"
    folder.mkdir()
    for name in (PROVENANCE_ENVELOPE, PROVENANCE_FILE, SBOM_FILE):
        shutil.copy(tmp_path / f"ctx.{name}", folder / name)
    code, output = _verify(allowed, folder / PROVENANCE_ENVELOPE)
    assert code == 1 and "[cell]" in output and "Dockerfile" in output, output
    # the unchanged build's provenance, in the same kind of folder, verifies
    original = tmp_path / "original"
    original.mkdir()
    for name in (PROVENANCE_ENVELOPE, PROVENANCE_FILE, SBOM_FILE):
        shutil.copy(attempt / name, original / name)
    code, output = _verify(allowed, original / PROVENANCE_ENVELOPE)
    assert code == 0, output
