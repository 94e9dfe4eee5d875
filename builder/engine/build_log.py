"""Read BuildKit's plain progress log: which step is running, which one failed, and why.

Plain progress prints one block per build vertex: a header `#7 [stage 3/9] RUN pip install ...`,
then `#7 12.3 <output line>`, and finally `#7 DONE 40.1s`, `#7 CACHED` or `#7 ERROR: <message>`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LINE = re.compile(r"#(\d+) (.*)")
_OUTPUT = re.compile(r"(\d+\.\d+) (.*)")
_STATUS = re.compile(r"DONE [\d.]+s|CACHED|CANCELED.*|ERROR:? ?.*|sha256:[0-9a-f]+")


@dataclass
class Vertex:
    """One build step as the log shows it."""

    number: int
    name: str = ""
    output: list[str] = field(default_factory=list)
    state: str = "running"  # running | done | cached | error | canceled
    error: str = ""


class PlainLog:
    """Incremental parser of `--progress=plain` output; feed it lines as they arrive."""

    def __init__(self) -> None:
        self.vertices: dict[int, Vertex] = {}
        self.trailer: list[str] = []  # lines outside any vertex (final `error: failed to solve ...`)

    def feed(self, line: str) -> Vertex | None:
        """Parse one line; returns the vertex it belongs to (None for lines outside vertices)."""
        line = line.rstrip("\n")
        match = _LINE.fullmatch(line)
        if not match:
            if line.strip():
                self.trailer.append(line)
            return None
        number, rest = int(match.group(1)), match.group(2)
        vertex = self.vertices.setdefault(number, Vertex(number))
        output = _OUTPUT.fullmatch(rest)
        if output:
            vertex.output.append(output.group(2))
        elif rest.startswith("DONE"):
            vertex.state = "done"
        elif rest == "CACHED":
            vertex.state = "cached"
        elif rest.startswith("CANCELED"):
            vertex.state = "canceled"
        elif rest.startswith("ERROR"):
            vertex.state = "error"
            vertex.error = rest.partition("ERROR")[2].lstrip(": ").strip()
        elif not vertex.name and not _STATUS.fullmatch(rest):
            vertex.name = rest
        elif vertex.name and rest != vertex.name and not _STATUS.fullmatch(rest):
            vertex.output.append(rest)  # progress lines such as `transferring context: 2B done`
        return vertex

    @property
    def failed(self) -> Vertex | None:
        """The step that failed (the last vertex in error), if any."""
        errors = [v for v in self.vertices.values() if v.state == "error"]
        return errors[-1] if errors else None


@dataclass(frozen=True)
class FailureClass:
    """A kind of build failure, what gives it away, and what to do about it."""

    name: str
    hint: str
    patterns: tuple[str, ...]
    step_patterns: tuple[str, ...] = ()

    def matches(self, step: str, text: str) -> bool:
        return any(re.search(p, step, re.I) for p in self.step_patterns) or any(
            re.search(p, text, re.I | re.M) for p in self.patterns
        )


#: Checked in order: the first class whose patterns match the failing step's text wins.
FAILURE_CLASSES: tuple[FailureClass, ...] = (
    FailureClass(
        "base_image_unavailable",
        "the FROM image cannot be found or pulled: build or pull it first, log in to its registry, "
        "or pass --base-image with a local or reachable image",
        (
            r"pull access denied",
            r"failed to resolve source metadata",
            r"manifest unknown",
            r"repository does not exist",
            r"manifest for .* not found",
            r"not found: manifest",
        ),
        (r"^\[internal\] load metadata for ", r"^\[[^\]]*\d+/\d+\] FROM "),
    ),
    FailureClass(
        "image_verify_failed",
        "the image's verify step found it does not match its manifest: the FAIL lines say "
        "what was expected and found -- another torch build, a GPU arch it was not compiled for, a binary "
        "sentencepiece, or a pin pip did not honour",
        (r"^verify: FAIL ", r"verify: the image does not match its manifest"),
    ),
    FailureClass(
        "patch_does_not_apply",
        "a patch of the patch set no longer applies to this source version: rebase it or drop it "
        "from the series for this version in recipes/",
        (
            r"patch does not apply",
            r"^error: patch failed",
            r"Hunk #\d+ FAILED",
            r"can't find file to patch",
            r"error: could not apply",
            r"^CONFLICT \(",
            r"Reversed \(or previously applied\) patch detected",
        ),
    ),
    FailureClass(
        "compiler_out_of_memory",
        "the compiler ran out of memory: lower MAX_JOBS (about 4.5 GB RAM per job for ROCm kernels), "
        "add swap, or build on a larger machine",
        (
            r"Killed signal terminated program",
            r"virtual memory exhausted",
            r"cc1plus: out of memory",
            r"fatal error: Killed",
            r"internal compiler error: Killed",
            r"exit code: 137",
            r"std::bad_alloc",
        ),
    ),
    FailureClass(
        "hipify_error",
        "hipify (tools/amd_build/build_amd.py) failed: check the source revision, the patch set "
        "and that ROCm is at /opt/rocm (ROCM_PATH)",
        (
            r'File "[^"]*(hipify|build_amd)[^"]*", line \d+',
            r"hipify\S*: (error|fatal)",
            r"build_amd\.py.*(error|failed)",
        ),
    ),
    FailureClass(
        "network_pip_index",
        "a download failed: check the network (`--network host`), the proxy (HTTP(S)_PROXY, "
        "--ca-cert), the package index, or build offline with --wheelhouse DIR",
        (
            r"Could not find a version that satisfies the requirement",
            r"No matching distribution found",
            r"Temporary failure (in name resolution|resolving)",
            r"Name or service not known",
            r"Failed to establish a new connection",
            r"Connection (refused|reset|timed out)",
            r"Read ?timed ?out",
            r"CERTIFICATE_VERIFY_FAILED",
            r"SSLError",
            r"ProxyError",
            r"Could not resolve (host|proxy)",
            r"Failed to fetch",
            r"Unable to locate package",
            r"network bridge not found",
            r"Could not fetch URL",
            r"HTTP error 40[134]",
            r"Network is unreachable",
            r"certificate verify failed",
        ),
    ),
    FailureClass(
        "dependency_conflict",
        "pip could not resolve a consistent set of versions: check the pins in recipes/ for this cell",
        (r"ResolutionImpossible", r"conflicting dependencies"),
    ),
    FailureClass(
        "disk_full",
        "the disk is full: free space (`docker builder prune`, `docker image prune`)",
        (r"No space left on device",),
    ),
    FailureClass(
        "build_context_error",
        "a file the Dockerfile needs is missing from the context or a secret was not given: re-render the context",
        (
            r"failed to compute cache key",
            r"failed to calculate checksum",
            r"secret .* not found",
            r"failed to stat",
            r"no such file or directory.*(wheelhouse|secret)",
        ),
    ),
    FailureClass(
        "compile_error",
        "a native build failed: read the last lines of the step above",
        (
            r"CMake Error",
            r"make(\[\d+\])?: \*\*\*",
            r"ninja: build stopped",
            r"Failed building wheel",
            r"error: command '.*' failed",
            r"subprocess-exited-with-error",
            r"fatal error: .*\.h: No such file",
        ),
    ),
)

UNKNOWN = FailureClass("unknown", "read the last lines of the failing step above and the full log", ())


_EVIDENCE = re.compile(r"\b(error|fatal|failed|cannot|could not|not found|no such|killed|denied)\b", re.I)
_NOISE = re.compile(r'^\s*(File ".*", line \d+|\^+$|note: |╰─>|\[end of output\]|ERROR: Failed building wheel)')


@dataclass(frozen=True)
class BuildFailure:
    """What a failed build tells the user: the step, its last output lines and the failure class."""

    step: str
    failure_class: str
    hint: str
    message: str
    tail: tuple[str, ...]
    evidence: tuple[str, ...] = ()  # the step's first lines that look like the cause (errors, not found, ...)


def diagnose(log: PlainLog, tail_lines: int = 25, evidence_lines: int = 8) -> BuildFailure:
    """Classify a failed build from its parsed log."""
    vertex = log.failed
    if vertex is not None:
        step, output, message = vertex.name, vertex.output, vertex.error
    else:  # failed before any step ran (bad flag, missing secret file, frontend error)
        step, output, message = "(before the first step)", [], ""
    trailer = [line for line in log.trailer if line.strip() not in ("------",)]
    if not message and trailer:
        message = trailer[-1]
    text = "\n".join([*output, message, *trailer[-5:]])
    found = next((c for c in FAILURE_CLASSES if c.matches(step, text)), UNKNOWN)
    tail = tuple(output[-tail_lines:]) if output else tuple(trailer[-tail_lines:])
    evidence = [line.strip() for line in output if _EVIDENCE.search(line) and not _NOISE.match(line)]
    evidence = tuple(dict.fromkeys(line for line in evidence if line not in tail))[:evidence_lines]
    return BuildFailure(step, found.name, found.hint, message, tail, evidence)
