"""The `envbuild` command line: one Click group, each sub-command defined in its own module."""

from __future__ import annotations

import click

from builder import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="envbuild")
def main() -> None:
    """Reproducible, verified ROCm fine-tuning environments, with evidence."""


# Sub-commands register below, one line each: main.add_command(module.command)
from builder import cli_matrix  # noqa: E402
main.add_command(cli_matrix.matrix)
from builder import cli_report  # noqa: E402
main.add_command(cli_report.report)
from builder import cli_ci  # noqa: E402
main.add_command(cli_ci.ci)
from builder import cli_doctor, cli_run  # noqa: E402
main.add_command(cli_doctor.doctor)
main.add_command(cli_run.run)
from builder import cli_image  # noqa: E402
main.add_command(cli_image.image)
from builder import cli_render  # noqa: E402
main.add_command(cli_render.recipes_group)
main.add_command(cli_render.render_command)
from builder import cli_inspect  # noqa: E402
main.add_command(cli_inspect.inspect)
from builder import cli_diff  # noqa: E402
cli_matrix.matrix.add_command(cli_diff.diff_cells)
from builder import cli_publish  # noqa: E402
cli_matrix.matrix.add_command(cli_publish.publish)
