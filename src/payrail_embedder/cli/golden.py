"""Quality: eval measures search on labelled queries; `golden` keeps the registry's own."""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import click

from ..base.errors import EXIT_STATUS
from ..base.output_files import output_file
from ..base.reports import emit
from ..quality import evaluation
from ..registry import golden as golden_module
from ..registry import labelled_queries, sources
from ..registry.embedding_model import registry_model
from ..registry.search import check_query
from ..settings import FiniteRange, Settings
from .common import JSON_OPTION, QUERY_ARGUMENT, Failure, connect_for_search, log_change, read_query

# eval's exit status when a metric is below its floor (--min-hit-at-3, --min-mrr): the report is
# printed all the same; 1 and 2 keep their meaning (errors.EXIT_STATUS), so a pipeline can tell
# "search got worse" from "eval could not run".
BELOW_FLOOR = 3


def floor_option(name: str, metric: str):
    return click.option(
        name,
        type=FiniteRange(0, 1),
        help=f"Exit {BELOW_FLOOR} when {metric} is below this (0 to 1): a deployment pipeline refuses a change that makes search worse.",
    )


@click.command("eval")
@click.argument("queries_file", metavar="[QUERIES.jsonl]", required=False, type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path))
@click.option(
    "--compare",
    "candidate_model",
    metavar="MODEL",
    help="Also score MODEL (on the --embedder backend; a tuned model's name, say) side by side, as if it were the "
    "registry's: every enabled record embedded by it in memory; nothing is switched or written.",
)
@floor_option("--min-hit-at-3", "hit@3")
@floor_option("--min-mrr", "mrr@3")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"queries", "metrics", "ranks": {"meanRank", "medianRank", "hit@10", "unranked"}, "misses", "labelWarnings", '
    '"belowFloors", "bySource": [{"source", "enabled", "places", "wanted", "unwanted", "missed"}, ...]}, each miss with "ranks" '
    '(each relevant record\'s "rank" and "fromTopThree"), "byLanguage": {LANGUAGE: {"queries", "metrics"}} when a query has a '
    'language tag, and with --compare "compare": {"model", "metrics", "ranks", "misses", "bySource"} (and its "byLanguage").',
)
@click.pass_obj
def eval_(settings: Settings, queries_file, candidate_model, min_hit_at_3, min_mrr, as_json):
    """Measure retrieval quality: run labelled queries through search and score the answers.

    Without QUERIES.jsonl, the registry's own golden queries (`golden list`); a registry that has
    none is an error (exit 2), so a pipeline never passes on nothing measured. Each line of
    QUERIES.jsonl ("-": standard input): {"query": "...", "relevant": [[provider, method], ...]},
    and optionally "language": a tag of 2 to 8 letters, digits and hyphens ("en", "de", "zh").
    Every query goes through the same search path as `search`, against the configured registry
    (the queries are embedded in one batch). Prints hit@1, hit@3, recall@1, recall@3, capped
    recall@3 and MRR@3; the exact rank of each query's first relevant record among every enabled
    record, in search's order (its mean and median, and hit@10); and the queries with no relevant
    method in the top 3, each with the three that came instead and each relevant record's rank
    ("rank 41: 38 places from the top three"; for operators: agents get three records); when a
    query has a language tag (a line's, or a golden query's), the metrics of each language too
    (queries without one as "untagged"). By source: for each catalog the answers' records came
    from (`list --sources`), the top-three places its records take, how many of those a query
    should find (wanted) or not (unwanted), and how many of its records a query should find are
    not in its top three (missed): which catalog takes whose places. Labels naming a record the
    registry lacks, or holds only as a draft, are warned about. Exits 3 when a metric is below its floor
    (--min-hit-at-3, --min-mrr), naming it; 1 when search is unavailable; 2 for bad input.
    """
    floors = {metric: floor for metric, floor in (("hit@3", min_hit_at_3), ("mrr@3", min_mrr)) if floor is not None}
    queries = labelled_queries.read_labelled_queries(queries_file) if queries_file else None
    with connect_for_search(settings) as conn:
        if queries is None:
            queries = golden_module.labelled_queries(conn)
            if not queries:
                raise Failure(
                    "invalid_input",
                    "the registry has no golden queries to measure: add some (`payrail-embedder golden add` or "
                    "`golden import FILE`), or give eval a QUERIES.jsonl file",
                )
        report = evaluation.evaluate(conn, settings.embedder, queries)
        model = registry_model(conn)
        # The candidate model's name and its report.
        compared = None
        if candidate_model:
            candidate = replace(settings, model=candidate_model).embedder()
            compared = candidate_model, evaluation.evaluate_candidate(conn, candidate, queries)
        # Which catalogs the answers' records came from, read as the registry holds them now.
        by_source = sources.places_by_source(conn, evaluation.answers_by_id(report))
        compared_by_source = sources.places_by_source(conn, evaluation.answers_by_id(compared[1])) if compared else []
    below = report.below(floors)
    emit(evaluation.Evaluation(report, model.name if model else "no model", below, compared, by_source, compared_by_source), as_json)
    for failed in below:
        click.echo(f"below the floor: {failed['metric']} {failed['value']:.3f} < {failed['floor']:.3f}", err=True)
    if below:
        sys.exit(BELOW_FLOOR)


def checked_language(value: str | None) -> str | None:
    """--language's tag as a golden query keeps it (None without one); a usage error saying why it is not one."""
    if value is None:
        return None
    try:
        return labelled_queries.language_tag(value)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


@click.group()
def golden():
    """Keep the registry's golden queries: questions and the records they should find, which eval measures.

    Evaluation and training data beside the records, never ranking input: search reads none, and
    agents cannot. Operators write them; operators and the embedder read them.
    """


@golden.command("list")
@JSON_OPTION
@click.pass_obj
def golden_list(settings: Settings, as_json):
    """List the golden queries in the order they were added, each with its records as they are named now.

    With --json: {"goldenQueries": [{"goldenQueryId", "query", "relevant": [{"recordId",
    "provider", "method", "enabled"}, ...], "language", "addedBy", "addedAt"}, ...]} (language:
    a tag, or null).
    """
    with settings.connect() as conn:
        queries = golden_module.golden_queries(conn)
    emit(golden_module.GoldenQueries(queries), as_json)


@golden.command("add")
@QUERY_ARGUMENT
@click.option(
    "--relevant",
    "names",
    multiple=True,
    required=True,
    metavar='"PROVIDER / METHOD"',
    help='A record QUERY should find, "Provider / Method" or "Provider Method"; repeat it for each, in the order they should come.',
)
@click.option(
    "--language",
    metavar="TAG",
    callback=lambda ctx, param, value: checked_language(value),
    help='The language QUERY is in, as eval tags it: 2 to 8 letters, digits and hyphens ("en", "de", "zh-Hant"), compared regardless of case.',
)
@JSON_OPTION
@click.pass_obj
def golden_add(settings: Settings, query, names, language, as_json):
    """Add a golden query: QUERY ("-": read it from standard input), as an agent would ask it, and the records it should find.

    The query obeys search's rules; the same query (ignoring case, compatibility forms, invisible
    characters and runs of white space) cannot be added twice: `golden remove` it first to label
    it anew. Drafts may be named (eval warns that search never returns them). The query is
    embedded with the registry's model first and its vector kept beside it (the backoffice ranks
    golden queries with it; search never reads it): nothing is added when that fails. With
    --language, eval reports its figures by language.
    """
    query = check_query(read_query(query))
    started = time.monotonic()
    with settings.connect() as conn:
        added = golden_module.add_golden_query(conn, settings.embedder, query, names, language=language)
        log_change("golden_add", conn, started, golden_query=added.golden_query_id, relevant=len(added.relevant))
    emit(golden_module.GoldenQueries([added], "added"), as_json)


@golden.command("remove")
@click.argument("queries", nargs=-1, required=True, metavar="QUERY...")
@JSON_OPTION
@click.pass_obj
def golden_remove(settings: Settings, queries, as_json):
    """Remove golden queries, each named by its query (compared as `golden add` compares them); all or none.

    The records they named are not touched. With --json: {"removed": [...]}, as `golden list --json` lists them.
    """
    started = time.monotonic()
    with settings.connect() as conn:
        removed = golden_module.remove_golden_queries(conn, queries)
        log_change("golden_remove", conn, started, removed=len(removed))
    emit(golden_module.GoldenQueries(removed, "removed"), as_json)


@golden.command("import")
@click.argument("file", metavar="FILE", type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path))
@JSON_OPTION
@click.pass_obj
def golden_import(settings: Settings, file, as_json):
    """Add the golden queries of FILE, eval's format, all or none.

    Each line, as eval reads it: {"query": "...", "relevant": [[provider, method], ...]}, naming
    records the registry holds (drafts too) as names compare, and optionally "language" (kept
    with the query: eval reports by it). Other fields (the benchmark's "source") are ignored and
    named once ("ignored fields: source (in 296 lines)"; with --json "ignoredFields":
    [{"field", "lines"}, ...]). Every line is checked first, and every refused line printed with its number: a
    record no record goes by, one named twice, a query an earlier line has, or one the registry
    holds with other records or another language (`golden remove` it first). One refused line
    adds nothing (exit 2). A query the registry holds with the same records and language is left
    as it is, so importing the same file again changes nothing. The new queries are embedded with
    the registry's model first and their vectors kept, as `golden add` does.
    """
    started = time.monotonic()
    queries = labelled_queries.read_labelled_queries(file)
    with settings.connect() as conn:
        report = golden_module.import_golden_queries(conn, settings.embedder, queries, str(file))
        log_change(
            "golden_import",
            conn,
            started,
            failed=not report.saved,
            added=report.added,
            unchanged=report.unchanged,
            refused=len(report.refused),
        )
    emit(report, as_json)
    if not report.saved:
        sys.exit(EXIT_STATUS["invalid_input"])


@golden.command("export")
@click.argument("file", metavar="[FILE]", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.pass_obj
def golden_export(settings: Settings, file):
    """Write every golden query as a line of eval's format to FILE ("-" or none: standard output).

    In the order they were added; each line {"query", "relevant", "language"} in that order (the
    language only where it has one), the records in the order they were given, each by the names
    it has now. `golden import` of the file into a registry holding the same records, then
    `golden export`, gives the same bytes. FILE is written whole or not at all (renamed into place
    once written).
    """
    with settings.connect() as conn:
        data = "".join(line + "\n" for line in golden_module.export_lines(conn)).encode("utf-8")
    with output_file(file or "-") as written:
        written.write(data)
