"""The typed grammar of recipe values: what an image reference, a package name, a version, an arch name, a URL
looks like. recipes.load checks the packaged recipes and a site's overlay with it alike, so no value that
reaches a plan or a template can hold a line end, a quote or a path step.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

from builder.plan import placeholders
from builder.plan.image_ref import is_image_reference


def _matching(pattern: str, what: str, *, empty: bool = False):
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if (empty and value == "") or compiled.fullmatch(value):
            return value
        raise ValueError(f"{value[:80]!r} is not {what}")

    return AfterValidator(check)


def _template(samples: dict[str, str], pattern: str, what: str, *, empty: bool = False):
    """A field whose text may name the placeholders of `samples` (builder.plan.placeholders) and nothing else in
    braces, and which, filled with those sample values, matches `pattern`."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        placeholders.check(value, samples)
        if (empty and value == "") or compiled.fullmatch(placeholders.fill(value, **samples)):
            return value
        raise ValueError(f"{value[:80]!r} is not {what}")

    return AfterValidator(check)


def _image(value: str) -> str:
    if value and not is_image_reference(value):
        raise ValueError(f"{value[:80]!r} is not an image reference (name[:tag][@digest], as `docker pull` takes)")
    return value


#: A release key ("6.2", "7.0.2", "cpu", "13.0"): it names files and folders, so no path step.
ReleaseName = Annotated[str, _matching(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}", "a release name such as 6.2 or cpu")]
#: A dotted version ("2.4.1", "3.10").
Dotted = Annotated[str, _matching(r"\d+(\.\d+){0,4}", "a dotted version such as 2.4.1")]
OptionalDotted = Annotated[str, _matching(r"\d+(\.\d+){0,4}", "a dotted version such as 22.04", empty=True)]
#: A package version as pip and apt write them (PEP 440 and Debian: digits, letters, . + ~ - _ !).
Version = Annotated[str, _matching(r"[0-9][A-Za-z0-9.+~_!-]{0,63}", "a package version such as 6.2.60200")]
OptionalVersion = Annotated[str, _matching(r"[0-9][A-Za-z0-9.+~_!-]{0,63}", "a package version", empty=True)]
#: A Python or Debian package name (PEP 508 names; Debian names are lower-case with + . -).
Package = Annotated[str, _matching(r"[A-Za-z0-9](?:[A-Za-z0-9._+-]{0,126}[A-Za-z0-9+])?", "a package name")]
OptionalPackage = Annotated[
    str, _matching(r"[A-Za-z0-9](?:[A-Za-z0-9._+-]{0,126}[A-Za-z0-9+])?", "a package name", empty=True)
]
#: A pip requirement or distribution name as the pip-ROCm route writes it, "{arch}" and "{torch}" filled in per
#: cell (builder.plan.placeholders): rocm[libraries,device-{arch}]==7.14.0, rocm-sdk-device-{arch}.
Requirement = Annotated[
    str,
    _template(
        {"arch": "gfx90a", "torch": "2.4.1"},
        r"[A-Za-z0-9][A-Za-z0-9._\[\],=<>!~+-]{0,200}",
        "a pip requirement such as rocm[libraries,device-{arch}]==7.14.0",
    ),
]
#: An accelerator arch: gfx90a, sm_90.
Arch = Annotated[str, _matching(r"gfx[0-9a-f]{3,5}|sm_[0-9]{2,3}[a-z]?", "an arch name such as gfx90a or sm_90")]
OptionalArch = Annotated[str, _matching(r"gfx[0-9a-f]{3,5}|sm_[0-9]{2,3}[a-z]?", "an arch name", empty=True)]
#: A local version label or wheel-index suffix: rocm6.2, cu130, cpu.
Label = Annotated[str, _matching(r"[a-z0-9][a-z0-9.]{0,31}", "a label such as rocm6.2 or cpu")]
OptionalLabel = Annotated[str, _matching(r"[a-z0-9][a-z0-9.]{0,31}", "a label such as rocm6.2", empty=True)]
#: A distribution codename: jammy, bookworm.
Codename = Annotated[str, _matching(r"[a-z][a-z0-9]{1,31}", "a distribution codename such as jammy")]
#: An image reference (distribution/reference's grammar, builder.plan.image_ref).
Image = Annotated[str, AfterValidator(_image)]
#: An https:// URL: a host name (DNS labels, or an IPv4 address) and an optional port, then a path, query or
#: fragment of RFC 3986's characters without a quote, a space or a backslash; no user part, at most 500 characters.
_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
URL = re.compile(rf"(?=.{{1,500}}\Z)https://{_HOST}(?::[0-9]{{1,5}})?(?:[/?#][A-Za-z0-9._~:/?#\[\]@!$&()*+,;=%-]*)?")


def is_url(value: object) -> bool:
    """Whether `value` is an https:// URL of the recipes' grammar (what the report may link)."""
    return isinstance(value, str) and URL.fullmatch(value) is not None


Url = Annotated[str, _matching(URL.pattern, "an https:// URL (https://host[:port]/path, no quote or space)")]
OptionalUrl = Annotated[str, _matching(URL.pattern, "an https:// URL", empty=True)]
#: An apt source a PPA is added by: ppa:owner/name.
Ppa = Annotated[
    str, _matching(r"ppa:[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*", "a PPA such as ppa:owner/name", empty=True)
]
#: A git tag or branch: v2.4.1, release/2.5.
GitRef = Annotated[str, _matching(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}", "a git tag or branch")]
#: An environment variable name.
EnvName = Annotated[str, _matching(r"[A-Z_][A-Z0-9_]{0,63}", "an environment variable name", empty=True)]
#: A value a build environment variable takes: one line of printable characters, no quote or backslash.
EnvValue = Annotated[str, _matching(r"[A-Za-z0-9._,:;/=+@%-]{0,500}", "one word of a build environment")]
#: An absolute path in the image.
ImagePath = Annotated[str, _matching(r"/[A-Za-z0-9._/-]{0,255}", "an absolute path such as /opt/rocm/bin", empty=True)]
#: A name of a flavor, a table or a file: lower-case word.
Name = Annotated[str, _matching(r"[a-z][a-z0-9_-]{0,31}", "a name such as rocm")]
#: Free text (descriptions, sources): one line, no control characters.
Line = Annotated[str, _matching(r"[^\x00-\x1f\x7f\u2028\u2029]{0,2000}", "one line of text without control characters")]
#: A recipes file name: rocm.toml.
TomlFile = Annotated[str, _matching(r"[a-z][a-z0-9_-]{0,31}\.toml", "a file name such as rocm.toml")]
#: An image digest: sha256:<64 hex>.
Digest = Annotated[str, _matching(r"sha256:[0-9a-f]{64}", "a digest such as sha256:<64 hex digits>", empty=True)]
#: A flavor's wheel index, "{suffix}" standing for the release's wheel index suffix: an https:// URL once filled.
WheelIndex = Annotated[
    str,
    _template({"suffix": "rocm6.2"}, URL.pattern, "an https:// URL such as https://download.pytorch.org/whl/{suffix}"),
]
#: The local version label of a flavor's official wheel ("{suffix}") or of its source build ("{version}", the
#: release): PEP 440 local version characters once filled (rocm6.2, cpu, cu130); "" for none.
LocalVersion = Annotated[
    str,
    _template(
        {"suffix": "rocm6.2"}, r"[a-z0-9][a-z0-9.]{0,63}", "a local version label such as {suffix} or cpu", empty=True
    ),
]
SourceLocalVersion = Annotated[
    str,
    _template(
        {"version": "6.2"}, r"[a-z0-9][a-z0-9.]{0,63}", "a local version label such as rocm{version}", empty=True
    ),
]
