"""The run routes' import of builder.interrupt (container, local_run, apptainer and the CLI's run verb still name it
here; they move to builder.interrupt with the runner interface)."""

from builder.interrupt import (  # noqa: F401
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    StopSignal,
    Terminated,
    describe,
    later_ctrl_c_ignored,
    sigterm_as_interrupt,
)
