"""What a workflow raises when the work cannot be done as asked. Each error carries the message for the user and the
exit code the command ends with; builder.cli.errors turns them into Click's (no Click here)."""

from __future__ import annotations


class WorkflowError(Exception):
    """The request cannot be carried out and nothing was done: exit code 2 unless a subclass says otherwise."""

    exit_code = 2


class BadRequest(WorkflowError):
    """The request asks for what envbuild cannot do or does not know (the command's usage is shown with it)."""


class BadValue(WorkflowError):
    """One value of the request is wrong; `field` names it (the request's field, which the CLI names as its option or
    argument)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class BadInput(WorkflowError):
    """A file, database or tool the request points at cannot be used: a missing prerequisite, a damaged matrix, data
    that breaks its schema."""


class BadRecipeData(BadInput):
    """The recipe data does not validate (a site's --recipes folder, or an edited recipes/)."""

    def __init__(self, detail: object) -> None:
        super().__init__(f"recipe data is invalid: {detail}")


class Failed(WorkflowError):
    """The work ran and did not succeed; the message says what and where its record is (exit code 1)."""

    exit_code = 1


class Stopped(WorkflowError):
    """The work stopped for a reason it has already told (through its notices): `message` (may be empty) is said
    as it is, without "Error:", and the command exits with `exit_code`."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code
