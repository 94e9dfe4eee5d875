"""The workflows' errors (builder.workflows.errors) as Click's, one mapping for every verb (`@workflow_errors`): a bad
request shows the usage, a bad value names its option, a stop says its message as it is, everything else is
"Error: MESSAGE" with the error's exit code."""

from __future__ import annotations

import functools

import click

from builder.workflows import errors


class Refused(click.ClickException):
    """A workflow's error said as Click says one ("Error: ..."), with the error's exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def workflow_errors(**param_hints: str):
    """Decorate a verb so that the workflow errors it lets through end it as Click's errors; `param_hints` names the
    option or argument of each request field a BadValue may name (e.g. `paths="PATHS"`)."""

    def decorate(command):
        @functools.wraps(command)
        def run(*args, **kwargs):
            try:
                return command(*args, **kwargs)
            except errors.BadRequest as exc:
                raise click.UsageError(str(exc)) from exc
            except errors.BadValue as exc:
                raise click.BadParameter(str(exc), param_hint=param_hints.get(exc.field, exc.field)) from exc
            except errors.Stopped as exc:
                if str(exc):
                    click.echo(str(exc), err=True)
                raise SystemExit(exc.exit_code) from exc
            except errors.WorkflowError as exc:
                raise Refused(str(exc), exc.exit_code) from exc

        return run

    return decorate
