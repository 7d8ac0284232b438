"""payrail-embedder: the command line of Payrail Agent Search.

Every command parses its options, calls the package's functions and emits the report they
return (base/reports.py): text for people or, with --json, JSON for scripts. Failures have a code
scripts branch on (errors.EXIT_STATUS); with --json they are printed as {"error": CODE, "detail":
"..."} on standard output, usage errors too. The commands live in this package's modules, by
what they work on, and join the root group here.
"""

from __future__ import annotations

import sys

import click

from ..base import logs
from ..base.errors import EXIT_STATUS, code_and_detail
from ..base.output_files import full_disk, is_disk_full
from ..base.safe_text import json_text
from ..settings import Settings, settings_options
from . import advice, bulk, db, golden, model, records, search, serve
from .common import Failure

# Long-running: their log is what an operator watches, on a terminal too.
SERVERS = frozenset({"mcp", "backoffice"})


def as_failure(error: BaseException, command: str | None) -> Failure | None:
    """The Failure a known error means, or None for one that is not the user's to act on (a bug)."""
    if isinstance(error, Failure):
        return error
    if isinstance(error, click.ClickException):  # usage errors, unreadable files
        return Failure("invalid_query" if command == "search" else "invalid_input", error.format_message())
    known = code_and_detail(error)
    if known is None and is_disk_full(error):  # a write no command wraps (output_files.writing_to) names its file if it can
        where = error.filename if isinstance(error, OSError) and error.filename else "a file it was writing"
        known = code_and_detail(full_disk(where))
    return None if known is None else Failure(*known)


def wants_json(args: list[str]) -> bool:
    return "--json" in args[: args.index("--")] if "--" in args else "--json" in args


class Commands(click.Group):
    """The command group; its main turns every known failure into a Failure, printed as JSON with --json."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        args = list(sys.argv[1:] if args is None else args)
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except Exception as error:
            ctx = getattr(error, "ctx", None) or click.get_current_context(silent=True)
            failure = as_failure(error, ctx.command.name if ctx else None)
            if failure is None:
                raise
            if wants_json(args):
                click.echo(json_text(failure.to_json()))
            elif isinstance(error, click.UsageError):
                error.show()
            else:
                failure.show()
            sys.exit(EXIT_STATUS[failure.code])


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="payrail-agent-search")
@settings_options
@click.pass_context
def cli(ctx, **settings):
    """Payrail Agent Search: the registry's embedder and command line.

    Agents ask in plain words and get back at most three provider methods;
    operators import, edit and sync the catalog.
    """
    ctx.obj = Settings(**settings)
    level = ctx.obj.log_level or logs.default_level(server=ctx.invoked_subcommand in SERVERS)
    logs.configure(ctx.obj.log_format, level, secrets=ctx.obj.secrets())


for command in (
    db.db,
    records.import_,
    records.export,
    records.list_,
    bulk.show,
    bulk.enable,
    bulk.disable,
    bulk.delete,
    bulk.undo,
    advice.advise,
    records.sync,
    search.search,
    golden.eval_,
    golden.golden,
    search.preview,
    records.edit,
    records.history,
    records.restore,
    model.model,
    serve.mcp,
    serve.operator,
    serve.agent,
    serve.backoffice,
):
    cli.add_command(command)
