"""The options of a version request (`--rocm 7.2 --torch 2.11 --arch MI300X ...`), shared by `envbuild render` and
`envbuild image`, mapped to the workflows' CellRequest; and the plan's table both print."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import click
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from builder.workflows.render import CellRequest


def request_options(command):
    """Click options that describe a build request (one set for `render` and `image`)."""
    options = [
        click.option(
            "--flavor",
            default=None,
            help="rocm (implied by --rocm), cuda (implied by --cuda) or cpu; "
            "see recipes/flavors.toml and recipes/flavors.d/.",
        ),
        click.option(
            "--rocm",
            "rocm",
            default=None,
            metavar="VERSION",
            help="ROCm release, e.g. 6.2 or 6.1.2 (6.1: the newest 6.1 release, echoed).",
        ),
        click.option("--cuda", "cuda", default=None, metavar="VERSION", help="CUDA release, e.g. 13.0."),
        click.option(
            "--torch",
            "torch",
            default=None,
            metavar="LINE",
            help="torch line (2.4) or release (2.4.1) [default: the newest line with an official wheel for "
            "the release, echoed].",
        ),
        click.option("--arch", default=None, metavar="GFX", help="GPU target, e.g. gfx90a (default: the recipe's)."),
        click.option("--python", default=None, metavar="X.Y", help="Python version (default: the base OS's)."),
        click.option(
            "--torch-source",
            type=click.Choice(["auto", "wheel", "source"]),
            default="auto",
            show_default=True,
            help="auto: the official wheel where one exists, else a source build.",
        ),
        click.option(
            "--base-image",
            default=None,
            metavar="REF",
            callback=_image_reference,
            help="Override the base image reference ([registry/]name[:tag][@digest]).",
        ),
        click.option(
            "--install-rocm",
            is_flag=True,
            help="Start from the plain Ubuntu image and install ROCm with amdgpu-install.",
        ),
        click.option(
            "--proven-only",
            is_flag=True,
            help="Refuse a torch source build no peer has shown to compile (exit 2, with the cell's public record).",
        ),
        click.option(
            "--unproven",
            is_flag=True,
            expose_value=False,
            help="Accepted and ignored: source cells build by default (docs/render.md).",
        ),
    ]
    return functools.reduce(lambda cmd, option: option(cmd), reversed(options), command)


def _image_reference(ctx, param, value: str | None) -> str | None:
    """--base-image must parse as an image reference: it goes into the Dockerfile's FROM line."""
    from builder.workflows.render import is_image_reference

    if value is not None and not is_image_reference(value):
        raise click.BadParameter(
            f"{value!r} is not an image reference; give [registry/]name[:tag][@digest] "
            "in lower case, e.g. rocm/dev-ubuntu-22.04:6.2",
            param_hint="'--base-image'",
        )
    return value


def request_from_options(
    flavor: str | None,
    rocm: str | None,
    cuda: str | None,
    torch: str | None,
    arch: str | None,
    python: str | None,
    torch_source: str,
    base_image: str | None,
    install_rocm: bool,
    proven_only: bool = False,
) -> CellRequest:
    """The version request `request_options` describe; raises click.UsageError (exit code 2) on conflicts."""
    from builder.workflows.render import CellRequest

    given = {name: version for name, version in (("rocm", rocm), ("cuda", cuda)) if version}
    if len(given) > 1:
        raise click.UsageError("--rocm and --cuda exclude each other: one accelerator per image")
    for name, version in given.items():
        if flavor and flavor != name:
            raise click.UsageError(f"--{name} {version} conflicts with --flavor {flavor}; drop one of them")
    implied = next(iter(given), "rocm")
    return CellRequest(
        flavor=flavor or implied,
        accel_version=given.get(flavor or implied),
        torch=torch,
        arch=arch,
        python=python,
        torch_source=torch_source,
        base_image=base_image,
        install_accel=install_rocm,
        proven_only=proven_only,
    )


def plan_table(plan, title: str) -> Table:
    """The rows of a workflow's plan (builder.plan.resolve.Plan.describe) as a two-column table."""
    table = Table(title=title, show_header=False, title_justify="left")
    for field, value in plan.describe():
        table.add_row(escape(field), escape(value))  # data, never markup: rocm[libraries,...]
    return table
