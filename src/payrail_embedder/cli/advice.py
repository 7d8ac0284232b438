"""`advise`: advice on how records fit the editorial template for guidance."""

from __future__ import annotations

import click

from ..base.reports import emit
from ..registry import advice, stored
from ..settings import Settings
from .common import JSON_OPTION


@click.command("advise")
@click.argument("names", nargs=-1, metavar="[RECORD]...")
@click.option(
    "--code", metavar="CODE", help="Only the records that get this advice (no_purpose, vague_purpose, no_instructions, no_notes, markup, no_docs_url)."
)
@click.option("--summary", "summary_only", is_flag=True, help="Print how many records get each piece of advice, not each record.")
@JSON_OPTION
@click.pass_obj
def advise(settings: Settings, names, code, summary_only, as_json):
    """Advise how records fit the editorial template for guidance; advice never blocks a save.

    RECORD: an id, one "Provider / Method", or a provider's name (every method it has); none:
    every record, drafts included. Each record that gets advice is listed with it (a Purpose line
    missing or vague, no Instructions or Notes line, Markdown or HTML, no docs URL), then how
    many records get each piece, enabled and drafts apart, with what to do. The rules are the
    database's (payrail.advise_provider_methods: docs/operators.md, "Advice on the editorial
    template"); agents never see advice, and search never reads it. With --json: {"checked",
    "counts": [{"code", "summary", "fix", "enabled", "drafts"}, ...], "records": [{"recordId",
    "provider", "method", "enabled", "advice": [{"code", "advice", "fix"}, ...]}, ...]}. Exits 0
    whatever the advice.
    """
    with settings.connect() as conn:
        if code is not None:
            advice.check_code(conn, code)
        record_ids = [record_id for name in names for record_id in stored.ids_named(conn, name)] if names else None
        report = advice.AdviceReport(
            [] if summary_only else advice.advised_records(conn, record_ids, code),
            advice.counts(conn, record_ids),
            advice.checked(conn, record_ids),
            summary_only,
        )
    emit(report, as_json)
