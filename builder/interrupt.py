"""SIGTERM ends a build or run like Ctrl-C: the same clean-up (a KeyboardInterrupt), then exit 143. A neutral module
(the standard library only): the CLI, the workflows and the engine use it."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived; handled wherever Ctrl-C is."""


@dataclass
class StopSignal:
    """What stopped the work, once something did."""

    terminated: bool = False

    @property
    def exit_code(self) -> int:
        return EXIT_TERMINATED if self.terminated else EXIT_INTERRUPTED


def describe(exc: BaseException) -> str:
    """ "SIGTERM" or "Ctrl-C", for messages and log notes."""
    return "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"


@contextmanager
def sigterm_as_interrupt() -> Iterator[StopSignal]:
    """Within the block the first SIGTERM raises Terminated; later ones are ignored while clean-up runs."""
    stop = StopSignal()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, frame):
        if stop.terminated:
            return
        stop.terminated = True
        raise Terminated("SIGTERM")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def later_ctrl_c_ignored() -> Iterator[None]:
    """Within the block a further Ctrl-C (SIGINT) is ignored: what the first one started (stopping the
    workload, writing and recording its `interrupted` result) finishes however often a user presses it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
