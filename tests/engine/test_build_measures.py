"""What a build record measures on the building machine: ccache's hits and misses from the build log (every layout
ccache has printed them in), and the host's memory in use while a build runs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from builder.engine import ccache_stats
from builder.engine.build_host import MemorySampler, memory_in_use
from repo import REPO_ROOT

#: ccache 4.7.5's own `--show-stats` output, recorded here (Debian bookworm's ccache 4.8+really4.7.5-1, three
#: compiles and one repeat: 1 hit, 3 misses).
RECORDED = REPO_ROOT / "tests" / "data" / "ccache-4.7.5-show-stats.txt"


def _buildkit(lines: list[str], vertex: int = 14) -> list[str]:
    """Lines as BuildKit's plain progress prints a step's output: `#<vertex> <seconds> <line>`."""
    return [f"#{vertex} {100 + i}.{i % 10} {line}\n" for i, line in enumerate(lines)]


def test_ccache_4_7_output_recorded_here_is_read():
    assert ccache_stats.from_lines(RECORDED.read_text().splitlines()) == ccache_stats.CcacheStats(hits=1, misses=3)


def test_ccache_statistics_inside_a_buildkit_log_are_read_and_the_storage_section_is_not_counted(tmp_path):
    log = tmp_path / "build.log"
    log.write_text(
        "#13 [torch-source-build 3/3] RUN bash /opt/envbuild/common/build_torch.sh\n"
        + "".join(_buildkit(["-- Building wheel torch-2.4.1+rocm6.2", *RECORDED.read_text().splitlines()]))
        + "#13 DONE 9000.1s\n"
    )
    assert ccache_stats.from_log(log) == ccache_stats.CcacheStats(hits=1, misses=3)


def test_ccache_4_5_summary_with_a_primary_storage_section():
    """ccache v4.5.1 (src/core/Statistics.cpp @764dc837): `Summary:` with a misses row, then the storage's own."""
    lines = [
        "Summary:",
        "  Hits:               3319 / 11646 (28.50 %)",
        "    Direct:           2552 / 12061 (21.16 %)",
        "    Preprocessed:      767 /  9447 (8.12 %)",
        "  Misses:             8327",
        "    Direct:           9509",
        "    Preprocessed:     8680",
        "  Uncacheable:        7658",
        "Primary storage:",
        "  Hits:               7847 / 24060 (32.61 %)",
        "  Misses:            16213",
    ]
    assert ccache_stats.from_lines(_buildkit(lines)) == ccache_stats.CcacheStats(hits=3319, misses=8327)


def test_ccache_4_4_summary_without_a_misses_row_counts_misses_from_the_total():
    """ccache v4.4 (src/core/Statistics.cpp @6ac58b50) prints hits / (hits + misses) and no misses row."""
    lines = [
        "Summary:",
        "  Hits:                  5 /     9 (55.56 %)",
        "    Direct:              3 /     9 (33.33 %)",
        "    Preprocessed:        2 /     6 (33.33 %)",
        "Primary storage:",
        "  Hits:                 10 /    18 (55.56 %)",
        "  Misses:                8",
    ]
    assert ccache_stats.from_lines(lines) == ccache_stats.CcacheStats(hits=5, misses=4)


def test_ccache_3_layout_sums_direct_and_preprocessed_hits():
    """ccache up to v4.3 (src/Statistics.cpp @2c13bce2): one `{:32}{:8}` row per counter."""
    lines = [
        f"{'cache directory':32}/root/.ccache",
        f"{'cache hit (direct)':32}{4:8}",
        f"{'cache hit (preprocessed)':32}{1:8}",
        f"{'cache miss':32}{7:8}",
        f"{'cache hit rate':34}{41.67:6.2f} %",
    ]
    assert ccache_stats.from_lines(lines) == ccache_stats.CcacheStats(hits=5, misses=7)


def test_the_last_statistics_block_wins_and_a_log_without_one_is_not_measured(tmp_path):
    first = ["Cacheable calls: 2 / 2", "  Hits: 0 / 2", "  Misses: 2 / 2", "Local storage:"]
    second = ["Cacheable calls: 9 / 9", "  Hits: 8 / 9", "  Misses: 1 / 9", "Local storage:"]
    assert ccache_stats.from_lines(first + second) == ccache_stats.CcacheStats(8, 1)
    assert ccache_stats.from_lines(["#5 1.0 Successfully installed torch", "  Hits: 3 / 4"]) is None
    assert ccache_stats.from_log(tmp_path / "missing.log") is None


def test_memory_in_use_is_total_minus_available_and_the_sampler_keeps_the_peak(tmp_path):
    meminfo = tmp_path / "meminfo"

    def write(available_kb: int) -> None:
        meminfo.write_text(f"MemTotal:       16000000 kB\nMemFree:  1 kB\nMemAvailable:   {available_kb} kB\n")

    write(12_000_000)
    assert memory_in_use(meminfo) == (4_000_000 * 1024, 16_000_000 * 1024)
    sampler = MemorySampler(interval_s=0.01, meminfo=meminfo).start()
    stop = threading.Event()

    def churn():  # the build's memory rises to 10 GB in use, then falls again before it ends
        for available in (10_000_000, 6_000_000, 9_000_000, 11_000_000):
            write(available)
            time.sleep(0.1)
        stop.set()

    threading.Thread(target=churn).start()
    stop.wait(5)
    peak = sampler.stop()
    assert peak.start_bytes == 4_000_000 * 1024 and peak.peak_bytes == 10_000_000 * 1024
    assert peak.total_bytes == 16_000_000 * 1024 and peak.samples >= 4


def test_the_real_meminfo_is_read_and_an_unreadable_one_gives_no_figure(tmp_path):
    used, total = memory_in_use()
    assert 0 < used < total
    assert memory_in_use(tmp_path / "none") is None
    assert MemorySampler(meminfo=Path(tmp_path / "none")).start().stop() is None
