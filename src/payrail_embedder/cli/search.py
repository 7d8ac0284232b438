"""The agent path from the command line: search, and preview of what enabling a draft would change."""

from __future__ import annotations

import logging
from dataclasses import replace

import click
import psycopg

from ..base import logs
from ..base.reports import emit
from ..quality import golden_rankings
from ..registry import stored
from ..registry.changes import Change, Refused, Saved
from ..registry.records import ProviderMethod
from ..registry.search import Matches, check_query, search_provider_methods
from ..settings import Settings
from .common import QUERY_ARGUMENT, Failure, one_connection_at_a_time, read_query


@click.command("search")
@QUERY_ARGUMENT
@click.option("--json", "as_json", is_flag=True, help='Print {"matches": [...]} or {"error", "detail"}.')
@click.pass_obj
def search(settings: Settings, query, as_json):
    """Find at most three provider methods for QUERY, a need in plain words ("-": read it from standard input).

    An exact provider or method name is answered by name, without the embedder. Exits 2 for
    invalid_query (fix the query) and 1 for search_unavailable (try again later).

    The bundled model (all-MiniLM-L6-v2) is English-only: a query in another language tends to
    get records that share its language or script, not its meaning. For a multilingual registry,
    switch to OpenAI's text-embedding-3-small, which is multilingual: `payrail-embedder
    --embedder openai model switch text-embedding-3-small` (docs/embeddings.md, Languages).
    """
    query = check_query(read_query(query))  # invalid_query before any connection, even with the database down
    connections = one_connection_at_a_time(settings)
    found = search_provider_methods(connections, settings.embedder, query)
    emit(Matches(found), as_json)
    if not found:
        # No match: a registry of drafts only says so (the answer stays the seed's shape).
        try:
            note = stored.all_drafts_in_words(connections(stored.counts))
        except psycopg.Error:
            note = None
        if note:
            logs.tell(note, "all_drafts", {"detail": note}, logging.WARNING)


@click.command("preview")
@click.argument("query", metavar="[QUERY]", required=False)
@click.option(
    "--draft",
    required=True,
    metavar='"PROVIDER / METHOD"',
    help='The record to count as enabled: "Provider / Method" or "Provider Method", as the name path writes a pair.',
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"matches": [...]} or {"error", "detail"}, as search --json does; without QUERY, the effect: '
    '{"record", "enabled", "goldenQueries", "changes": [...], "moves": [...], "embeddedNow"}, each with "ranks": '
    '[{"recordId", "provider", "method", "enabled", "before", "after"}].',
)
@click.pass_obj
def preview(settings: Settings, query, draft, as_json):
    """Show what search would answer for QUERY if the draft were enabled; changes nothing.

    The same paths, order, errors and exit statuses as search (payrail.preview_search). The draft
    needs a vector of its current content: run `payrail-embedder sync` first.

    Without QUERY: which golden queries' top three enabling the draft would change (it gains
    them, another loses them, ...), each with its top three now and after, as `eval` would find
    them once it is enabled. A draft without a vector is embedded for this, not saved.
    """
    if query is None:
        with settings.connect() as conn:
            row = stored.find_by_name(conn, [draft])
            effect = golden_effect(conn, settings, replace(stored.record_of(row), enabled=True), row)
        emit(effect, as_json)
        return
    query = check_query(read_query(query))
    connections = one_connection_at_a_time(settings)
    row = connections(lambda conn: stored.find_by_name(conn, [draft]))
    matches = search_provider_methods(connections, settings.embedder, query, counted_draft=(row["provider"], row["method"]))
    emit(Matches(matches), as_json)


def golden_effect(conn: psycopg.Connection, settings: Settings, record: ProviderMethod, row: dict) -> golden_rankings.Effect:
    """What saving record over row would change in the golden queries' top threes (saved in a
    transaction, measured, rolled back); a Failure when the save is refused."""
    preview = golden_rankings.measured_edit(conn, settings.embedder, Change(record, row["id"], row["version"]))
    if not isinstance(preview.outcome, Saved):
        raise Failure("invalid_input" if isinstance(preview.outcome, Refused) else "unavailable", preview.outcome.reason)
    return preview.effect
