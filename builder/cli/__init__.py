"""The `envbuild` command line: one Click group (`main`, here) and one module per verb group (image, run, render,
lock, matrix, report, inspect, doctor, ci, sif, slurm; diff, publish and attest (sign, verify) are `matrix`
sub-commands). A verb maps its flags to a typed request, calls one workflow (builder.workflows) and turns the
outcome into output and an exit code; the workflows' errors become Click's in one place (errors). store_options,
request_options and paths hold the options and output checks several verbs share. It imports builder.workflows and
the neutral modules (builder.paths, slug, strict_json, bounded_read, interrupt, as_found) only: a contract in
pyproject.toml, which lists the imports `run workload` still makes until it gets its workflow. A sub-command's module
is imported only when it runs (`envbuild --help` imports none of them: no docker SDK, matplotlib or pydantic).
Nothing in builder imports it."""

from __future__ import annotations

import errno
import importlib
from pathlib import Path

import click

from builder import __version__
from builder.paths import RECIPES_ENV_VAR

# name -> (module, attribute, the summary `envbuild --help` shows: the command's own first docstring line)
COMMANDS = {
    "recipes": (
        "builder.cli.render",
        "recipes_group",
        "The version data in recipes/: known cells and how each gets torch.",
    ),
    "render": (
        "builder.cli.render",
        "render_command",
        "Write a deterministic build context (Dockerfile and Apptainer cell.def) for a version request.",
    ),
    "image": (
        "builder.cli.image",
        "image",
        "Render the build context of a request (e.g. `--rocm 7.2 --torch 2.11 --arch MI300X`) and build it "
        "with BuildKit.",
    ),
    "sif": (
        "builder.cli.sif",
        "sif",
        "Make a cell's SIF (from an image, a context's cell.def or a pull) and verify it inside Apptainer.",
    ),
    "slurm": (
        "builder.cli.slurm",
        "slurm",
        "Run cells as a Slurm job array of Apptainer tasks, and collect their results into the matrix.",
    ),
    "run": ("builder.cli.run", "run", "Run things in built images (or locally) and record what they measured."),
    "doctor": (
        "builder.cli.doctor",
        "doctor",
        "Check this host for GPU containers: kernel, amdgpu driver, /dev/kfd and /dev/dri access, GPU "
        "archs, iommu=pt on multi-GPU hosts, Docker engine, BuildKit. Exit code 1 when a check fails.",
    ),
    "lock": (
        "builder.cli.lock",
        "lock",
        "Resolve the dependency locks (recipes/locks/): every distribution an image installs, with hashes.",
    ),
    "matrix": (
        "builder.cli.matrix",
        "matrix",
        "The compatibility matrix: which (ROCm, torch, arch) cells build, train correctly, how fast.",
    ),
    "report": (
        "builder.cli.report",
        "report",
        "Write the compatibility report: a ROCm × torch (× arch) grid and one page per cell.",
    ),
    "inspect": (
        "builder.cli.inspect",
        "inspect",
        "List the GPU archs an image's or a file's code objects cover, and say whether --arch is missing.",
    ),
    "ci": (
        "builder.cli.ci",
        "ci",
        "The product's CI matrix (ci/): one job per recipe cell, then the published report.",
    ),
}


class LazyGroup(click.Group):
    """Commands from COMMANDS, imported on first use; the command list is printed from COMMANDS alone."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attribute, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attribute)

    def invoke(self, ctx: click.Context):
        """Every command: Ctrl-C and SIGTERM stop it (its clean-up runs, and a second signal never cuts it short),
        then exit 130 or 143 (builder.interrupt.stop_signals). A path the file system cannot name (a part over its
        length limit: only ever a path the user gave) is bad input, exit 2."""
        from builder.interrupt import EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated, stop_signals

        try:
            with stop_signals():
                return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            click.echo("interrupted (SIGTERM)" if isinstance(exc, Terminated) else "interrupted (Ctrl-C)", err=True)
            ctx.exit(EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED)
        except OSError as exc:
            if exc.errno != errno.ENAMETOOLONG:
                raise
            click.echo(
                f"Error: {str(exc.filename)[:300]!r}: a name in this path is longer than the file system "
                "allows; give a shorter path",
                err=True,
            )
            ctx.exit(2)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary) for name, (_, _, summary) in COMMANDS.items()])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="envbuild")
@click.option(
    "--recipes",
    "site_recipes",  # handed to each verb by builder.cli.site_recipes
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    envvar=RECIPES_ENV_VAR,
    help="A site's recipe folder over the packaged recipes/: its entries add to "
    f"or replace the packaged ones (docs/render.md) [env {RECIPES_ENV_VAR}].",
)
def main(site_recipes: Path | None) -> None:
    """Reproducible, verified ROCm fine-tuning environments, with evidence.

    Exit codes: 0 success, 1 a build or run that did not pass, 2 bad input (nothing written), 130 Ctrl-C,
    143 SIGTERM.
    Start with `envbuild recipes list`; `envbuild COMMAND --help` for each command."""
