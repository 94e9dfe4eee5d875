"""`python -m workload`: a Ctrl-C or SIGTERM before the run's own handlers are up (while torch imports, say)
ends it with exit code 130 and one line, never a traceback; the run's result is written by `main` itself."""

import sys

try:
    from .cli import main

    sys.exit(main())
except KeyboardInterrupt:
    print("[workload] interrupted before the run started", file=sys.stderr, flush=True)
    sys.exit(130)
