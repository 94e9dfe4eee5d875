"""Failures the workload reports in result.json, each with its `error_class`."""

from __future__ import annotations

#: The SIGINT/SIGTERM numbers that reached the run now going on (noted by cli's handler before it raises
#: KeyboardInterrupt; cleared when the run ends). A library can swallow that KeyboardInterrupt (seen here: a Ctrl-C inside numpy's
#: lazy `numpy.dtypes` import under transformers, after which the run went on to a ModuleNotFoundError); a run
#: that was signalled ends `interrupted` all the same, never with a verdict.
RECEIVED_SIGNALS: list[int] = []


class WorkloadError(Exception):
    """A failure with a result-schema `error_class` and the status it maps to."""

    error_class = "exception"
    status = "error"


class InputError(WorkloadError):
    """Bad input from the user (data, model or adapter path, output dir): exit code 2, no result is written."""


class DataError(InputError):
    """The dataset file is unusable; the message names the file and, where it applies, the line."""

    error_class = "data_error"

    def __init__(self, path, message: str, line: int | None = None):
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {message}")
        self.path, self.line = str(path), line


class ModelError(WorkloadError):
    """The model could not be loaded or built."""

    error_class = "model_error"


class PathError(InputError):
    """A model, adapter or output path given by the user cannot be used; the message says what to pass."""

    error_class = "usage_error"


class UnsupportedFamily(WorkloadError):
    """The installed transformers has no implementation of the requested Gemma family."""

    error_class = "unsupported_family"


class NonFiniteLoss(WorkloadError):
    """Loss or gradient norm became NaN/inf: training diverged."""

    error_class = "nan_loss"
    status = "fail"


class DidNotLearn(WorkloadError):
    """Training finished but evaluation accuracy is not clearly above chance."""

    error_class = "did_not_learn"
    status = "fail"


class DidNotTrain(WorkloadError):
    """No optimizer step ran: the run measured nothing about learning (never a pass)."""

    error_class = "did_not_train"


class ProbeFailure(WorkloadError):
    """At least one environment probe failed."""

    error_class = "probe_failure"
    status = "fail"
