"""Which attempts are verdicts about an environment, and what identifies that environment (docs/matrix.md).

A build or run that reached the environment and passed or failed there is a verdict. One stopped by
the user, or failed on the user's input (a typo'd base image, a bad flag, bad data), is an attempt:
recorded with its class, never a verdict. The store sets `counts` from these rules on every write.
"""

from __future__ import annotations

#: Build failure classes that are about the input or a stop, not the environment.
BUILD_ATTEMPT_CLASSES = frozenset({"base_image_unavailable", "build_context_error", "interrupted", "usage_error"})
#: Run error classes that are about the input, the engine or a stop, not the environment.
#: The slurm_* classes are tasks the scheduler ended (time limit, node failure, preemption, cancellation, any
#: other end state) or whose result.json did not belong to it: about the site or the request, never the
#: environment (docs/matrix.md "Slurm end states").
RUN_ATTEMPT_CLASSES = frozenset(
    {
        "interrupted",
        "data_error",
        "model_error",
        "usage_error",
        "input_error",
        "container_error",
        "did_not_train",
        "slurm_timeout",
        "slurm_node_fail",
        "slurm_preempted",
        "slurm_cancelled",
        "slurm_lost",
        "slurm_result_mismatch",
    }
)
#: The label of an environment known by nothing but its cell (a `--local` run, a build without manifest).
UNKNOWN_ENVIRONMENT = "local"


def sql_list(classes: frozenset[str]) -> str:
    """The classes as an SQL list literal, `('a', 'b')`: the migrations use the same sets as the writes."""
    if not all(c.replace("_", "").isalnum() for c in classes):
        raise ValueError(f"attempt classes must be plain names: {sorted(classes)}")
    return "(" + ", ".join(f"'{c}'" for c in sorted(classes)) + ")"


def counts(kind: str, status: str, failure_class: str | None) -> bool:
    """True when a build/run with this outcome is a verdict on its environment."""
    if status == "pass":
        return True
    return failure_class not in (BUILD_ATTEMPT_CLASSES if kind == "build" else RUN_ATTEMPT_CLASSES)


def environment(base_image: str | None, base_digest: str | None, context_hash: str | None) -> str:
    """A verdict's environment: base image reference and digest, and the context's content hash."""
    if not (base_image or base_digest or context_hash):
        return UNKNOWN_ENVIRONMENT
    digest = (base_digest or "").removeprefix("sha256:")[:12]
    base = f"{base_image or '?'}" + (f"@{digest}" if digest and "@" not in (base_image or "") else "")
    return f"{base} ctx {(context_hash or '?')[:12]}"
