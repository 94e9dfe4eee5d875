"""What a container prints, as envbuild keeps it: the run's log (`RunLog`) and a probe's answer (`ProbeOutput`).

Both are bounded in bytes, and the container never chooses where they go. `RunLog` writes container.log, a file
envbuild creates before the container starts, without following a link (O_EXCL | O_NOFOLLOW: a link the image
placed there is removed first, never written through). Every byte is scrubbed of the host's known secret values
(builder.known_secrets) before it is written or shown. What envbuild reads back (the workload's bad-input line,
Apptainer's FATAL line, the tail for a message) is kept from the stream as it passes, never read again from the
file, which the container might have replaced. Past its limit a log takes no more: the caller stops the container.
"""

from __future__ import annotations

import codecs
import os
from pathlib import Path

from builder.known_secrets import Scrubber, known_secrets
from builder.slug import escaped

#: What one run's container.log may hold (a smoke run writes a few KB, a speed run well under 1 MB).
MAX_RUN_OUTPUT = 64 << 20
#: What a probe may print (its one JSON line names every installed distribution: about 30 KB for 500 of them).
MAX_PROBE_OUTPUT = 1 << 20
#: The end of the output kept in memory for messages (the last lines, Apptainer's FATAL).
_TAIL = 64 * 1024
#: The longest line searched for the workload's bad-input mark.
_MAX_LINE = 64 * 1024
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class RunLog:
    """container.log of one run (see the module doc). `feed` returns the text to show (scrubbed, decoded, its control
    characters escaped but line breaks and tabs: builder.slug.escaped), or None once the output passed `limit` (then
    the caller stops the container); `finish` returns the rest at the end."""

    def __init__(self, path: Path, limit: int = MAX_RUN_OUTPUT, secrets: tuple[bytes, ...] | None = None):
        path = Path(path)
        try:
            os.unlink(path)  # a leftover of an earlier attempt, or a link: never written through
        except FileNotFoundError:
            pass
        self._fd = os.open(path, _NEW_FILE, 0o644)
        self.path, self.limit, self.written, self.over = path, limit, 0, False
        self._scrubber = Scrubber(known_secrets() if secrets is None else secrets)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._tail = b""
        self._line = b""
        self.lines_seen: list[bytes] = []  # complete lines handed to `watch`, newest last (bounded by the caller)
        self._watch = None

    def watch_lines(self, keep) -> None:
        """Keep each complete line for which `keep(line: str)` is true (the caller's marks; at most 100 lines)."""
        self._watch = keep

    def feed(self, chunk: bytes) -> str | None:
        if self.over:
            return None
        room = self.limit - self.written
        if len(chunk) > room:
            chunk, self.over = chunk[:room], True
        clean = self._scrubber.feed(chunk)
        self._write(clean)
        self.written += len(chunk)
        if self.over:
            rest = self._scrubber.flush()
            self._write(rest)
            self.note(f"output past {self.limit} bytes: not kept; envbuild stopped the container")
            return None
        return self._shown(clean)

    def _shown(self, data: bytes, final: bool = False) -> str:
        return escaped(self._decoder.decode(data, final), lines=True)

    def _write(self, data: bytes) -> None:
        if not data:
            return
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        self._tail = (self._tail + data)[-_TAIL:]
        if self._watch is not None:
            self._scan(data)

    def _scan(self, data: bytes) -> None:
        *complete, self._line = (self._line + data).split(b"\n")
        self._line = self._line[-_MAX_LINE:]
        for line in complete:
            text = line[-_MAX_LINE:].decode("utf-8", "replace")
            if self._watch(text):
                self.lines_seen = [*self.lines_seen[-99:], line[-_MAX_LINE:]]

    def note(self, text: str) -> None:
        """A line of envbuild's own in the log (`# envbuild: ...`)."""
        self._write(self._scrubber.flush() + f"\n# envbuild: {text}\n".encode())

    def finish(self) -> str:
        """At the end of the output: what the scrubber held back (written, and returned to be shown)."""
        rest = self._scrubber.flush()
        self._write(rest)
        return self._shown(rest, final=True)

    def tail(self) -> str:
        return self._tail.decode("utf-8", "replace")

    def close(self) -> None:
        if self._fd >= 0:
            self._write(self._scrubber.flush())
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "RunLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ProbeOutput:
    """A probe's output in memory, at most `limit` bytes: `add` returns False once it would pass the limit."""

    def __init__(self, limit: int = MAX_PROBE_OUTPUT):
        self.limit, self.over = limit, False
        self._data = bytearray()

    def add(self, chunk: bytes) -> bool:
        if len(self._data) + len(chunk) > self.limit:
            self._data += chunk[: self.limit - len(self._data)]
            self.over = True
            return False
        self._data += chunk
        return True

    def text(self) -> str:
        return self._data.decode("utf-8", "replace")
