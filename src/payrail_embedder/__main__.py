"""python -m payrail_embedder: the same command line as payrail-embedder."""

from .cli import cli

cli(prog_name="payrail-embedder")
