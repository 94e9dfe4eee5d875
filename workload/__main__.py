"""`python -m workload`: a Ctrl-C or SIGTERM before the run's own handlers are up (while torch imports, say)
ends it with exit code 130 and one line, never a traceback; the run's result is written by `main` itself.
Each signal is noted first (errors.RECEIVED_SIGNALS), so that one a library swallows still ends the run
`interrupted`."""

import signal
import sys

from .errors import RECEIVED_SIGNALS


def _interrupt(signum, _frame):
    RECEIVED_SIGNALS.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where the caller ignores it
    signal.signal(signal.SIGINT, _interrupt)
try:
    from .cli import main

    sys.exit(main())
except KeyboardInterrupt:
    print("[workload] interrupted before the run started", file=sys.stderr, flush=True)
    sys.exit(130)
