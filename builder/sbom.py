"""The SBOM of a built image: a CycloneDX 1.6 JSON document, written with cyclonedx-python-lib.

It lists what the image holds (the dpkg packages and Python distributions read from inside it, builder.engine
.image_contents) and what its manifest pinned (builder.build_inputs: the base by digest, torch by wheel hash or
source commit, the patch series, the locks by sha256). Two images built from one context have the same
document, byte for byte: nothing in it comes from the build's time or host. There is no timestamp, the image is
named by its content-hash tag, never by its id (the id covers the layers' mtimes), every bom-ref is a purl or a
fixed name, and the serial number is derived from the rest of the document (uuid5 of its sha256), not drawn at
random. CycloneDX asks a generator for a new serial number per document ("SHOULD"); this one is a function of
the content on purpose, so that equal images have equal SBOMs.

`read_components` reads such a document back (bounded, strict JSON) into {package: version} for `envbuild
matrix diff --sbom`. Imports no builder package but the neutral ones.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass

from builder import build_inputs, strict_json

MEDIA_TYPE = "application/vnd.cyclonedx+json"
SPEC_VERSION = "1.6"
#: Where an SBOM component came from (its `envbuild:source` property).
DPKG, PYTHON, PINNED = "dpkg", "python", "pinned"
SOURCE_PROPERTY = "envbuild:source"
#: What an SBOM read back may weigh and hold (an image of ROCm has about 1,500 dpkg packages).
MAX_SBOM_BYTES = 32 << 20
MAX_COMPONENTS = 200_000
_SERIAL_NAMESPACE = uuid.UUID("6f1d3c2e-5b0a-4c7e-9a8d-2e4b1f0c7a95")  # envbuild's own namespace for uuid5
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+~:-]{0,199}")


class SbomError(ValueError):
    """An SBOM document that cannot be read back (the message says why)."""


@dataclass(frozen=True, order=True)
class Package:
    """One installed package: a dpkg package (with its architecture) or a Python distribution."""

    source: str  # DPKG | PYTHON
    name: str
    version: str
    arch: str = ""


@dataclass(frozen=True)
class Contents:
    """What an image holds, as read from inside it: its OS (os-release ID, VERSION_ID) and its packages."""

    os_id: str
    os_version: str
    packages: tuple[Package, ...]

    def of(self, source: str) -> list[Package]:
        return sorted(p for p in self.packages if p.source == source)


def _pypi_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _purl(package: Package, contents: Contents):
    from packageurl import PackageURL

    if package.source == DPKG:
        qualifiers = {"arch": package.arch} if package.arch else {}
        if contents.os_id:
            qualifiers["distro"] = f"{contents.os_id}-{contents.os_version}" if contents.os_version else contents.os_id
        return PackageURL("deb", contents.os_id or None, package.name, package.version, qualifiers or None)
    return PackageURL("pypi", None, _pypi_name(package.name), package.version)


def _image_name(image_tag: str) -> tuple[str, str | None]:
    """(repository, tag) of an image reference."""
    last = image_tag.rsplit("/", 1)[-1]
    if ":" in last:
        repository, _, tag = image_tag.rpartition(":")
        return repository, tag
    return image_tag, None


def _sha256_hash(hexdigest: str):
    from cyclonedx.model import HashAlgorithm, HashType

    return HashType(alg=HashAlgorithm.SHA_256, content=hexdigest)


def _pinned_component(item: build_inputs.Input):
    """A pinned input as a component: the base image, a patch or a lock file (torch joins the installed torch)."""
    from cyclonedx.model import ExternalReference, ExternalReferenceType, Property, XsUri
    from cyclonedx.model.component import Component, ComponentType

    sha = item.digest.get("sha256")
    kind = ComponentType.CONTAINER if item.role == "base-image" else ComponentType.FILE
    references = []
    if item.uri and re.match(r"https?://", item.uri):
        references.append(ExternalReference(type=ExternalReferenceType.DISTRIBUTION, url=XsUri(item.uri)))
    properties = [Property(name=SOURCE_PROPERTY, value=PINNED), Property(name="envbuild:role", value=item.role)]
    if item.digest.get("gitCommit"):
        properties.append(Property(name="envbuild:git_commit", value=item.digest["gitCommit"]))
    if item.note:
        properties.append(Property(name="envbuild:note", value=item.note))
    return Component(
        type=kind,
        name=item.name,
        version=f"sha256:{sha}" if sha and item.role == "base-image" else None,
        hashes=[_sha256_hash(sha)] if sha else [],
        external_references=references,
        properties=properties,
        bom_ref=f"pinned:{item.role}:{item.name}",
    )


def _torch_pins(component, inputs: list[build_inputs.Input]) -> None:
    """Attach the manifest's torch pins to the torch component: the wheel's sha256 (or the index it came from
    unhashed) as distribution references, a source build's commit as its pedigree."""
    from cyclonedx.model import ExternalReference, ExternalReferenceType, Property, XsUri
    from cyclonedx.model.component import Commit, Pedigree

    for item in inputs:
        sha = item.digest.get("sha256")
        if item.role in ("torch-wheel", "torch-index"):
            component.external_references.add(
                ExternalReference(
                    type=ExternalReferenceType.DISTRIBUTION,
                    url=XsUri(item.uri or item.name),
                    hashes=[_sha256_hash(sha)] if sha else [],
                    comment=item.name if item.role == "torch-wheel" else f"{item.name} ({item.note})",
                )
            )
        elif item.role == "torch-source":
            repo = (item.uri or "").removeprefix("git+").rsplit("@", 1)[0]
            commit = item.digest.get("gitCommit")
            component.pedigree = Pedigree(commits=[Commit(uid=commit, url=XsUri(repo) if repo else None)])
            component.external_references.add(ExternalReference(type=ExternalReferenceType.VCS, url=XsUri(repo)))
            if item.note:
                component.properties.add(Property(name="envbuild:torch_tag", value=item.note))
        component.properties.add(Property(name="envbuild:pinned", value=item.role))


def document(
    image_tag: str,
    contents: Contents,
    manifest: dict | None,
    base_digest: str | None,
    envbuild_version: str,
) -> bytes:
    """The SBOM of the image `image_tag` (the manifest's content-hash tag where there is a manifest) as UTF-8 JSON
    bytes: equal inputs give equal bytes, whatever their order."""
    from cyclonedx.model import Property
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6

    manifest = manifest if isinstance(manifest, dict) else None
    tag = str((manifest or {}).get("image_tag") or image_tag)
    repository, version = _image_name(tag)
    root = Component(type=ComponentType.CONTAINER, name=repository, version=version, bom_ref="image")
    metadata = BomMetaData(component=root)
    metadata.timestamp = None  # the library stamps "now" unless told otherwise
    metadata.tools.components.add(
        Component(type=ComponentType.APPLICATION, name="envbuild", version=envbuild_version, bom_ref="tool:envbuild")
    )
    for name in ("cell_key", "context_hash"):
        if manifest and isinstance(manifest.get(name), str):
            metadata.properties.add(Property(name=f"envbuild:{name}", value=manifest[name]))
    if contents.os_id:
        metadata.properties.add(Property(name="envbuild:os", value=f"{contents.os_id} {contents.os_version}".strip()))
    bom = Bom(metadata=metadata)
    pinned = build_inputs.pinned(manifest, base_digest)
    torch_pins = [i for i in pinned if i.role.startswith("torch-")]
    installed = []
    for package in sorted(set(contents.packages)):
        purl = _purl(package, contents)
        component = Component(
            type=ComponentType.LIBRARY,
            name=package.name,
            version=package.version,
            purl=purl,
            bom_ref=purl.to_string(),
            properties=[Property(name=SOURCE_PROPERTY, value=package.source)],
        )
        if package.source == PYTHON and _pypi_name(package.name) == "torch" and torch_pins:
            _torch_pins(component, torch_pins)
            torch_pins = []
        installed.append(component)
    others = [_pinned_component(i) for i in pinned if not i.role.startswith("torch-")]
    if torch_pins:  # no torch installed to attach them to: the pins stand alone
        others += [_pinned_component(i) for i in torch_pins]
    for component in [*installed, *others]:
        bom.components.add(component)
    bom.register_dependency(root, [*installed, *others])
    bom.serial_number = uuid.UUID(int=0)
    first = JsonV1Dot6(bom).output_as_string(indent=2)
    bom.serial_number = uuid.uuid5(_SERIAL_NAMESPACE, hashlib.sha256(first.encode()).hexdigest())
    return (JsonV1Dot6(bom).output_as_string(indent=2) + "\n").encode()


def _bounded_str(value, where: str, limit: int = 4096) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise SbomError(f"{where} is not a string of at most {limit} characters")
    return value


def read_components(raw: bytes) -> dict[str, str]:
    """{"<source> <name>[ (<arch>)]": version or sha256} of every component of an SBOM this module wrote; SbomError
    for a document that is not one (not CycloneDX JSON, too large, components that are not name/version pairs)."""
    if len(raw) > MAX_SBOM_BYTES:
        raise SbomError(f"{len(raw)} bytes: larger than {MAX_SBOM_BYTES}, the most an SBOM may weigh here")
    try:
        data = strict_json.loads(raw)
    except ValueError as exc:
        raise SbomError(f"not JSON as envbuild reads it: {exc}") from None
    if not isinstance(data, dict) or data.get("bomFormat") != "CycloneDX":
        raise SbomError("not a CycloneDX document (bomFormat is not 'CycloneDX')")
    components = data.get("components", [])
    if not isinstance(components, list) or len(components) > MAX_COMPONENTS:
        raise SbomError(f"'components' is not a list of at most {MAX_COMPONENTS} entries")
    out: dict[str, str] = {}
    for number, component in enumerate(components):
        where = f"components[{number}]"
        if not isinstance(component, dict):
            raise SbomError(f"{where} is not an object")
        name = _bounded_str(component.get("name"), f"{where}.name", 512)
        properties = component.get("properties", [])
        if not isinstance(properties, list):
            raise SbomError(f"{where}.properties is not a list")
        props = {
            p.get("name"): p.get("value") for p in properties if isinstance(p, dict) and isinstance(p.get("name"), str)
        }
        source = props.get(SOURCE_PROPERTY)
        source = source if source in (DPKG, PYTHON, PINNED) else "other"
        version = component.get("version")
        if version is None:
            hashes = component.get("hashes") if isinstance(component.get("hashes"), list) else []
            sha = next((h.get("content") for h in hashes if isinstance(h, dict) and h.get("alg") == "SHA-256"), None)
            version = f"sha256:{sha}" if isinstance(sha, str) else "-"
        version = _bounded_str(version, f"{where}.version", 512)
        arch = _purl_arch(component.get("purl"))
        key = f"{source} {name}" + (f" ({arch})" if arch else "")
        out[key] = version
    return out


def _purl_arch(purl) -> str:
    if not isinstance(purl, str):
        return ""
    found = re.search(r"[?&]arch=([A-Za-z0-9_.-]{1,32})(?:&|$)", purl)
    return found.group(1) if found else ""


def valid_token(text: str) -> bool:
    """Whether a package name or version read from an image is a plain token (letters, digits, . _ + ~ : -)."""
    return bool(_TOKEN.fullmatch(text))
