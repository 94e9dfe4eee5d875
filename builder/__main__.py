"""`python -m builder`: the envbuild CLI without its console script."""

from builder.cli import main

main(prog_name="envbuild")
