"""Labelled queries: a question and the records it should find, as a line of eval's JSON Lines
format (one reader for `eval FILE`, `golden import` and `model tune FILE`) or a golden query of
the registry (golden.py), and the records their names name, as the registry compares names.

A labelled query is {"query": "...", "relevant": [[provider, method], ...]}, and optionally
"language", a short language tag ("en", "de", "zh-Hant") that eval reports metrics by; a golden
query keeps its tag too (payrail.golden_queries.language). A line may carry other fields (the
benchmark's "source"): every reader takes the line and ignores them, and golden import names them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg

from ..base.errors import CodedError
from ..base.input_files import LineLimit, NumberedLine, SizeLimit, UnreadableLine, open_input
from ..base.safe_text import json_text
from .records import RECORD_LINE, refuse_duplicate_keys
from .search import InvalidQuery, Query, check_query

# A labelled query's fields; a file may carry others (the benchmark's "source"), which nothing reads.
LABELLED_FIELDS = ("query", "relevant", "language")

Pair = tuple[str, str]

# A language tag as BCP 47 writes one, loosely: 2 to 8 letters, digits and hyphens ("en", "pt-BR").
LANGUAGE_TAG = re.compile(r"[A-Za-z0-9-]{2,8}")
# What eval calls the queries without a tag, so no tag may be it.
UNTAGGED = "untagged"


class EvaluationError(CodedError):
    """The labelled file cannot be read."""

    code = "invalid_input"


@dataclass(frozen=True)
class LabelledQuery:
    # The file's line it was read from; None for a golden query of the registry.
    line: int | None
    query: Query
    relevant: tuple[Pair, ...]
    # The golden query's id (payrail.golden_queries.id); None for a file's.
    golden_query_id: int | None = None
    # The language tag, lower-cased (tags compare regardless of case); None without one.
    language: str | None = None
    # The fields of its line that no labelled query has (LABELLED_FIELDS), which nothing reads.
    ignored: tuple[str, ...] = ()

    def origin(self) -> dict:
        """Where it comes from, as JSON: {"line": N} for a file's query, {"goldenQueryId": ID} for the registry's."""
        return {"line": self.line} if self.golden_query_id is None else {"goldenQueryId": self.golden_query_id}

    def describe_origin(self) -> str:
        return origin_text(self.origin())

    def file_line(self) -> str:
        """The query as a line of the file format, without its newline, as `golden export` writes
        it: query, relevant, and language where it has one."""
        line = {"query": self.query, "relevant": [list(pair) for pair in self.relevant]}
        return json_text(line | {"language": self.language} if self.language is not None else line)


def origin_text(item: dict) -> str:
    """Where a query of a report (a miss, a label warning) comes from, for people: "line N" or "golden query ID"."""
    return f"line {item['line']}" if "line" in item else f"golden query {item['goldenQueryId']}"


# A labelled query's line may be as long as a catalog line (records.RECORD_LINE): a query of
# 2,000 characters and its hundred relevant pairs written at their longest.
LABELLED_QUERY_LINE = LineLimit(RECORD_LINE.bytes, "more than a labelled query line may take (docs/operators.md, Labelled query files)")
# The most relevant records a labelled query may name: a golden query's (db/schema/080-golden_queries.sql,
# golden_query_records_ordinal_check). eval counts the first three answers.
MAX_RELEVANT = 100
# A file's queries are held in memory (eval embeds them in one batch, golden import checks them all
# before it adds any, tune trains on them all), so a file holds at most this many, in at most this
# many bytes: 50,000 queries of a real file's length (a query and two labels, 150 to 300 bytes) take
# 8 to 15 MB. Read at the bounds, the costliest file (a hundred short labels a line) takes 200 MB in
# memory (docs/operators.md, Labelled query files).
MAX_LABELLED_QUERIES = 50_000
LABELLED_FILE = SizeLimit(16_000_000, "the most a labelled query file may take (docs/operators.md, Labelled query files): split it")


def read_labelled_queries(path: Path | str) -> list[LabelledQuery]:
    """The labelled queries of a file (any input open_input takes, "-" included), each with its
    line (parse_labelled_lines), the file within LABELLED_FILE."""
    with open_input(path, line_limit=LABELLED_QUERY_LINE, size_limit=LABELLED_FILE) as opened:
        return parse_labelled_lines(opened.lines(), opened.source)


def parse_labelled_lines(lines: Iterable[NumberedLine | UnreadableLine], source: str) -> list[LabelledQuery]:
    """The one reader of labelled queries, for `eval FILE`, `golden import` and `model tune FILE`.

    Each non-blank line is {"query": "...", "relevant": [[provider, method], ...]}, with an
    optional "language" tag (LANGUAGE_TAG, kept lower-cased); the first line that is not is
    refused, naming source and line: EvaluationError (invalid_input), or InvalidQuery
    (invalid_query) for a query search would refuse, before the database or the embedder is
    asked. A line naming more than MAX_RELEVANT records is refused, and so is the query after
    MAX_LABELLED_QUERIES, which is not read. Other fields are kept by name (LabelledQuery.ignored)
    and read by nobody. None at all is refused too.
    """
    queries: list[LabelledQuery] = []
    for line in lines:
        where = f"{source}:{line.number}"
        if isinstance(line, UnreadableLine):
            raise EvaluationError(f"{where}: {line.problem}")
        if len(queries) == MAX_LABELLED_QUERIES:
            raise EvaluationError(
                f"{where}: more than {MAX_LABELLED_QUERIES:,} labelled queries, the most a file may hold "
                "(docs/operators.md, Labelled query files): split it; the rest of the file was not read"
            )
        try:
            query, relevant, language, ignored = _labelled_fields(line.text)
        except (json.JSONDecodeError, ValueError, RecursionError) as error:
            raise EvaluationError(f"{where}: {_problem(error)}") from None
        try:
            checked = check_query(query)  # invalid_query before the database or the embedder is asked
        except InvalidQuery as error:
            raise InvalidQuery(f"{where}: {error.detail}") from None
        queries.append(LabelledQuery(line.number, checked, relevant, language=language, ignored=ignored))
    if not queries:
        raise EvaluationError(f"{source}: no labelled queries")
    return queries


def _labelled_fields(text: str) -> tuple[str, tuple[Pair, ...], str | None, tuple[str, ...]]:
    data = json.loads(text, object_pairs_hook=refuse_duplicate_keys)
    if not isinstance(data, dict):
        raise ValueError("a line must be a JSON object")
    missing = [name for name in ("query", "relevant") if name not in data]
    if missing:
        raise ValueError(f"missing field {', '.join(missing)}")
    query, relevant = data["query"], data["relevant"]
    if not isinstance(query, str):
        raise ValueError("query must be a string")
    if not (
        isinstance(relevant, list)
        and relevant
        and all(isinstance(pair, list) and len(pair) == 2 and all(isinstance(n, str) for n in pair) for pair in relevant)
    ):
        raise ValueError("relevant must be a non-empty array of [provider, method] pairs")
    if len(relevant) > MAX_RELEVANT:
        raise ValueError(f"relevant names {len(relevant):,} records; a labelled query may name at most {MAX_RELEVANT}, as a golden query may")
    for name in (name for pair in relevant for name in pair):
        if "\x00" in name or _has_lone_surrogate(name):
            raise ValueError(f"relevant names {name!r}, which PostgreSQL text cannot hold (a NUL or a lone surrogate)")
    language = language_tag(data["language"]) if "language" in data else None
    ignored = tuple(name for name in data if name not in LABELLED_FIELDS)
    return query, tuple((provider, method) for provider, method in relevant), language, ignored


def language_tag(tag: object) -> str:
    """tag as a labelled query keeps it (lower-cased), if it is a language tag (LANGUAGE_TAG, not
    UNTAGGED); ValueError saying why not otherwise."""
    if not (isinstance(tag, str) and LANGUAGE_TAG.fullmatch(tag)):
        raise ValueError("language must be a language tag of 2 to 8 letters, digits and hyphens, such as en, de or zh-Hant")
    if tag.lower() == UNTAGGED:
        raise ValueError(f'language "{tag}" is what eval calls queries without a tag: leave the field out instead')
    return tag.lower()


def _has_lone_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _problem(error: Exception) -> str:
    if isinstance(error, json.JSONDecodeError):
        return f"malformed JSON: {error.msg} at column {error.colno}"
    if isinstance(error, RecursionError):
        return "malformed JSON: nested too deeply"
    return str(error)


class NormalizedNames:
    """(provider, method) pairs as the registry compares them (payrail._normalize_name, the key of
    provider_methods_provider_method_key), each with the record it names, if any: one statement
    for all of them, a lookup of the unique key's index for each."""

    def __init__(self, conn: psycopg.Connection, pairs: Iterable[Pair]) -> None:
        pairs = list(dict.fromkeys(pairs))
        rows = conn.execute(
            """
            select payrail._normalize_name(u.provider), payrail._normalize_name(u.method), r.id, r.enabled
            from unnest(%s::text[], %s::text[]) with ordinality as u(provider, method, i)
            left join lateral (
              select pm.id, pm.enabled from payrail.provider_methods as pm
              where payrail._normalize_name(pm.provider) = payrail._normalize_name(u.provider)
                and payrail._normalize_name(pm.method) = payrail._normalize_name(u.method)
              offset 0
            ) as r on true
            order by u.i
            """,
            ([provider for provider, _ in pairs], [method for _, method in pairs]),
        ).fetchall()
        self._key = {pair: (provider, method) for pair, (provider, method, _, _) in zip(pairs, rows)}
        self._record = {pair: (record_id, enabled) for pair, (_, _, record_id, enabled) in zip(pairs, rows) if record_id is not None}

    def pair(self, provider: str, method: str) -> Pair:
        """The comparison key of the pair."""
        return self._key[(provider, method)]

    def record(self, provider: str, method: str) -> tuple[int, bool] | None:
        """(id, enabled) of the record the pair names, or None when the registry has none."""
        return self._record.get((provider, method))

    def enabled(self, provider: str, method: str) -> bool | None:
        """Whether the record the pair names is enabled, or None when the registry has none."""
        record = self.record(provider, method)
        return record[1] if record is not None else None


def label_problem(enabled: bool | None) -> str | None:
    """Why search can never return a labelled record (whether it is enabled; None: there is none), or None."""
    if enabled is None:
        return "not in the registry"
    return None if enabled else "a draft: search never returns it"


def label_warnings(queries: Sequence[LabelledQuery], names: NormalizedNames) -> list[dict]:
    """Labels naming a record the registry does not have, or has only as a draft: they count as misses."""
    return [
        {**labelled.origin(), "provider": provider, "method": method, "problem": problem}
        for labelled in queries
        for provider, method in labelled.relevant
        if (problem := label_problem(names.enabled(provider, method))) is not None
    ]
