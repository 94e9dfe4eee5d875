"""Ctrl-C and SIGTERM stop a build or run: the same clean-up (a KeyboardInterrupt), then exit 130 or 143; a second
signal never cuts the clean-up short. A neutral module (the standard library only): the CLI, the workflows, the engine
and the store use it."""

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


def stop_exception(signum: int) -> KeyboardInterrupt:
    """What a stop by `signum` raises: Terminated for SIGTERM, KeyboardInterrupt for Ctrl-C (SIGINT)."""
    return Terminated("SIGTERM") if signum == signal.SIGTERM else KeyboardInterrupt()


@contextmanager
def stop_signals() -> Iterator[StopSignal]:
    """Within the block the first Ctrl-C (SIGINT) or SIGTERM stops the work: it raises KeyboardInterrupt (Terminated
    for SIGTERM), so both run the same clean-up. From then on both signals are ignored until the process exits: what
    the first one started (stopping a workload or a build, writing and recording its result, exiting 130 or 143)
    finishes however often a user presses Ctrl-C. A block left without a stop puts the previous handlers back; a
    SIGINT the process inherited ignored (a shell's background job) stays ignored."""
    stop = StopSignal()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, frame):
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        stop.terminated = signum == signal.SIGTERM
        raise stop_exception(signum)

    caught = [sig for sig in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(sig) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, handler) for sig in caught}
    try:
        yield stop
    finally:
        if all(signal.getsignal(sig) is handler for sig in caught):  # no stop came, here or in a block inside
            for sig, earlier in previous.items():
                signal.signal(sig, earlier)


@contextmanager
def later_ctrl_c_ignored() -> Iterator[None]:
    """Within the block Ctrl-C (SIGINT) is ignored: a clean-up that must not be cut short (removing a container,
    recording a result a signal stopped) finishes however often a user presses it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
