"""A Dockerfile whose build sleeps in a RUN step, for tests that stop a build midway.

Each call gets a fresh nonce so the engine's cache never holds the step (a build that once ran
to completion would otherwise be replayed from cache in 0.1 s), and the marker the tests wait
for is printed by the step, not spelled in it: the plain log echoes each step's command line,
so waiting for a literal word from the command would fire before the step runs.
"""

from __future__ import annotations

import uuid

STARTED = "started-42"


def sleeper_dockerfile(base: str) -> str:
    """A two-step Dockerfile that prints STARTED and then sleeps for two minutes."""
    return f"FROM {base}\nRUN echo {uuid.uuid4().hex} started-$((6*7)) && sleep 120\n"


def step_started(log_text: str) -> bool:
    """True once the sleeping step has printed its marker (as output, not as the echoed command)."""
    return any(line.rstrip().endswith(STARTED) for line in log_text.splitlines())
