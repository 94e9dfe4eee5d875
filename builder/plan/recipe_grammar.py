"""The typed grammar of recipe values: what an image reference, a package name, a version, an arch name, a URL
looks like. recipes.load checks the packaged recipes and a site's overlay with it alike, so no value that
reaches a plan or a template can hold a line end, a quote or a path step.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

from builder.plan.image_ref import is_image_reference


def _matching(pattern: str, what: str, *, empty: bool = False):
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if (empty and value == "") or compiled.fullmatch(value):
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
#: A pip requirement or distribution name as the pip-ROCm route writes it ("{arch}" filled in per cell):
#: rocm[libraries,device-{arch}]==7.14.0, rocm-sdk-device-{arch}.
Requirement = Annotated[
    str,
    _matching(
        r"[A-Za-z0-9][A-Za-z0-9._\[\],{}=<>!~+-]{0,200}",
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
#: An https:// URL of printable characters with no space or quote.
Url = Annotated[str, _matching(r"https://[A-Za-z0-9._~:/?#\[\]@!$&()*+,;=%-]{1,500}", "an https:// URL")]
OptionalUrl = Annotated[
    str, _matching(r"https://[A-Za-z0-9._~:/?#\[\]@!$&()*+,;=%-]{1,500}", "an https:// URL", empty=True)
]
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
