"""Third-party chatter (deprecation warnings, library log lines, progress bars) off the run's terminal output and
into `DIR/third-party.log`, so the output shows the workload's own lines and the log keeps the rest."""

from __future__ import annotations

import contextlib
import logging
import warnings
from pathlib import Path

LOG_NAME = "third-party.log"
_LIBRARIES = ("transformers", "peft", "huggingface_hub", "accelerate", "torch")


@contextlib.contextmanager
def third_party_to(log_path: Path | None):
    """Inside: Python warnings and the libraries' log records go to `log_path` (appended, line-buffered), and
    transformers / huggingface_hub progress bars are off (a note in the log says so). None: nothing changes."""
    if log_path is None:
        yield
        return
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars
    from transformers.utils import logging as hf_logging

    with open(log_path, "a", encoding="utf-8", buffering=1) as log, warnings.catch_warnings():
        log.write("# third-party warnings and log records of this run (progress bars are off)\n")
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: log.write(
            warnings.formatwarning(message, category, filename, lineno, line)
        )
        handler = logging.StreamHandler(log)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        loggers = [logging.getLogger(name) for name in _LIBRARIES]
        saved = [(lg, lg.handlers[:], lg.propagate) for lg in loggers]
        for lg in loggers:
            lg.handlers, lg.propagate = [handler], False
        hf_logging.disable_progress_bar()
        disable_progress_bars()
        try:
            yield
        finally:
            for lg, handlers, propagate in saved:
                lg.handlers, lg.propagate = handlers, propagate
            hf_logging.enable_progress_bar()
            enable_progress_bars()
