"""The handlers every envbuild command runs under (builder.interrupt.stop_signals), with real signals sent to this
process: the first Ctrl-C or SIGTERM stops the work, every later one is ignored until the process exits."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from builder.interrupt import Terminated, describe, later_ctrl_c_ignored, stop_signals

STOPS = [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)]


def deliver(sig: int) -> None:
    """Send `sig` to this process and give the interpreter the moment it takes to run the handler."""
    os.kill(os.getpid(), sig)
    time.sleep(0.05)


@pytest.mark.parametrize("first, raised", STOPS)
def test_the_first_signal_stops_and_every_later_one_is_ignored_for_good(first, raised):
    with pytest.raises(raised) as stopped:
        with stop_signals() as stop:
            deliver(first)
    assert isinstance(stopped.value, Terminated) == (first == signal.SIGTERM)
    assert stop.exit_code == (143 if first == signal.SIGTERM else 130)
    assert describe(stopped.value) == ("SIGTERM" if first == signal.SIGTERM else "Ctrl-C")
    for later in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):  # after the block too: the process is exiting
        deliver(later)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


def test_a_stop_inside_a_nested_block_keeps_the_outer_block_from_handing_the_signals_back():
    """The CLI's block holds a workflow's: a stop in the inner one leaves both signals ignored when the outer ends."""
    with pytest.raises(KeyboardInterrupt):
        with stop_signals():
            try:
                with stop_signals():
                    deliver(signal.SIGINT)
            finally:
                deliver(signal.SIGINT)  # the clean-up in the outer block is not cut short
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


def test_a_block_left_without_a_stop_hands_the_previous_handlers_back():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with stop_signals() as outer:
        with stop_signals():
            pass
        assert signal.getsignal(signal.SIGINT) not in before
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert not outer.terminated  # nothing stopped it


def test_a_ctrl_c_the_process_inherited_ignored_stays_ignored():
    """A shell's background job starts with SIGINT ignored: a terminal's Ctrl-C is not for it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with stop_signals():
        deliver(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_within_a_clean_up_block_ctrl_c_is_ignored_and_the_handler_comes_back_after():
    seen = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with later_ctrl_c_ignored():
            deliver(signal.SIGINT)
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert seen == []
        deliver(signal.SIGINT)
        assert seen == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("block", [stop_signals, later_ctrl_c_ignored])
def test_off_the_main_thread_a_block_runs_and_leaves_the_handlers_alone(block):
    """Only the main thread may set handlers (signal.signal raises elsewhere): a worker thread's block just runs."""
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    seen, failed = [], []

    def worker():
        try:
            with block():
                seen.append((signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)))
        except BaseException as exc:  # noqa: BLE001 - the test reports whatever the thread raised
            failed.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert failed == [] and seen == [before]
