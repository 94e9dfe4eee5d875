"""The compiler cache's hits and misses, read from `ccache --show-stats` output in a BuildKit plain-progress log.

A torch source build zeroes ccache's counters before `setup.py` and prints them after it (the torch compile step
of builder/plan/steps.py), so the last statistics block in the log is that build's. ccache has printed them in
several layouts (ccache/ccache src/core/Statistics.cpp at each tag); each is read:

- 4.7 and later: `Cacheable calls:` then `  Hits: N / M` and `  Misses: N / M` (v4.7.5 @9b1033f3; its own
  output, recorded here, is tests/data/ccache-4.7.5-show-stats.txt);
- 4.5 and 4.6: `Summary:` then `  Hits: N / M` and `  Misses: N` (v4.5.1 @764dc837);
- 4.4: `Summary:` then `  Hits: N / M` and no misses row: misses are M - N (v4.4 @6ac58b50);
- up to 4.3: `cache hit (direct) N`, `cache hit (preprocessed) N`, `cache miss N` (src/Statistics.cpp, v4.3
  @2c13bce2).

The `Hits:` and `Misses:` of a storage section (`Local storage:`, `Primary storage:`) count storage reads, not
compilations, and are skipped. Nothing here prints.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_OUTPUT = re.compile(r"#\d+ \d+\.\d+ (.*)")
_SUMMARY = re.compile(r"^(Cacheable calls:|Summary:)")
_HITS = re.compile(r"^  Hits:\s+(\d+)(?:\s*/\s*(\d+))?")
_MISSES = re.compile(r"^  Misses:\s+(\d+)\b")
_OLD_HIT = re.compile(r"cache hit \((direct|preprocessed)\)\s+(\d+)\s*")
_OLD_MISS = re.compile(r"cache miss\s+(\d+)\s*")


@dataclass(frozen=True)
class CcacheStats:
    hits: int
    misses: int


def from_lines(lines) -> CcacheStats | None:
    """The last complete statistics block among `lines` (a BuildKit plain log's, or ccache's own output)."""
    found: CcacheStats | None = None
    summary, hits, calls, old_hits = False, None, None, {}
    for raw in lines:
        line = raw.rstrip("\n")
        match = _OUTPUT.fullmatch(line)
        text = match.group(1) if match else line
        if _SUMMARY.match(text):
            summary, hits, calls = True, None, None
            continue
        if summary:
            if not text.startswith(" "):  # the next section: 4.4 printed no misses row
                if hits is not None and calls is not None and calls >= hits:
                    found = CcacheStats(hits, calls - hits)
                summary = False
            elif seen := _HITS.match(text):
                hits, calls = int(seen.group(1)), int(seen.group(2)) if seen.group(2) else None
            elif (seen := _MISSES.match(text)) and hits is not None:
                found, summary = CcacheStats(hits, int(seen.group(1))), False
            continue
        if seen := _OLD_HIT.fullmatch(text):
            old_hits[seen.group(1)] = int(seen.group(2))
        elif (seen := _OLD_MISS.fullmatch(text)) and old_hits:
            found, old_hits = CcacheStats(sum(old_hits.values()), int(seen.group(1))), {}
    return found


def from_log(path: Path) -> CcacheStats | None:
    """`from_lines` over a log file, read line by line (a source build's log is large); None when unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return from_lines(handle)
    except OSError:
        return None
