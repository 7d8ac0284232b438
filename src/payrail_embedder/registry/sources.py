"""Where records came from (payrail's provider_methods.source): the source an import gives a file's
records, the sources a registry holds, and the top-three places the records of each take in the
answers to labelled queries (eval's and the Quality page's figures by source).

A source is advice and a filter for operators, never ranking input: search never reads it, and
agents cannot read it (docs/security.md). Its rule is the database's (provider_methods_source_check,
payrail._is_valid_source), which an import asks of a file's name before it reads a line.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

import psycopg

from ..base.errors import CodedError
from ..base.safe_text import json_text
from ..postgres.connection import one_row

# What writers that read no file call their records' source (the database's default is 'psql').
STANDARD_INPUT = "stdin"
BACKOFFICE = "backoffice"
EDIT = "edit"


class InvalidSource(CodedError):
    """A source that breaks provider_methods_source_check, named before anything is imported."""

    code = "invalid_input"


def of_file(path: str | Path) -> str:
    """The source of the records of a catalog file: its name without its folders, the same from any
    directory (a path as typed would make a record's source change with the directory it was
    imported from); standard input ("-") is "stdin"."""
    return STANDARD_INPUT if str(path) == "-" else Path(path).name


def of_upload(filename: str) -> str:
    """The source of an uploaded file's records: its name without any folders a browser sent (some
    send C:\\Users\\...\\records.jsonl: either separator is cut)."""
    return PureWindowsPath(filename).name


def check(conn: psycopg.Connection, source: str, what: str, instead: str = "") -> None:
    """InvalidSource, in payrail.rules' words, unless source is one the registry keeps; what says
    where it came from ("--source"), instead what else the operator may do."""
    # PostgreSQL text cannot hold NUL: no record's source can either, and the rule says why not.
    valid, rule, remedy = one_row(
        conn.execute(
            """select payrail._is_valid_source(%s), r.rule, r.remedy
               from payrail.rules as r where r.constraint_name = 'provider_methods_source_check'""",
            (source.replace("\x00", "\x01"),),
        )
    )
    if not valid:
        raise InvalidSource(f"{what} {json_text(source)} cannot be a source: a source {rule}. {remedy}{instead}")


@dataclass(frozen=True)
class SourceCount:
    """A source of the registry's records, with how many it has and how many of them are enabled."""

    source: str
    records: int
    enabled: int


def registry_sources(conn: psycopg.Connection) -> list[SourceCount]:
    """Every source the records came from, by name (payrail.list_provider_method_sources: the records
    list's narrow entries, no record's vector read)."""
    return [SourceCount(*row) for row in conn.execute("select source, records, enabled from payrail.list_provider_method_sources()")]


@dataclass(frozen=True)
class SourcePlaces:
    """What the records of one source do in the answers to labelled queries (each answer's top three)."""

    source: str
    # Its enabled records: those search can place.
    enabled: int
    # The top-three places its records hold, over every query.
    places: int
    # Of those, the places held by a record the query should find.
    wanted: int
    # Its records a query should find that are not in that query's top three.
    missed: int

    @property
    def unwanted(self) -> int:
        """The places its records hold in queries that should not find them: taken from the records they should."""
        return self.places - self.wanted

    def to_json(self) -> dict:
        return {
            "source": self.source,
            "enabled": self.enabled,
            "places": self.places,
            "wanted": self.wanted,
            "unwanted": self.unwanted,
            "missed": self.missed,
        }


# An answer to one labelled query, by record id: the records it should find (None: a label that
# names no record) and its top three, in order.
Answer = tuple[Collection[int | None], Sequence[int | None]]

SOURCES_OF = """
select i.id, pm.source from pg_catalog.unnest(%s::bigint[]) as i(id)
cross join lateral (select p.source from payrail.provider_methods as p where p.id = i.id offset 0) as pm
"""


def places_by_source(conn: psycopg.Connection, answers: Iterable[Answer]) -> list[SourcePlaces]:
    """The figures of each source whose records hold a place in a top three or are missed there, the
    most places first (then by name). Each record's source is read by its id (the records as they
    are now); a record deleted since the answers were read counts for no source."""
    answers = list(answers)
    ids = sorted({record_id for relevant, top in answers for record_id in (*relevant, *top) if record_id is not None})
    source_of: dict[int | None, str] = {record_id: source for record_id, source in conn.execute(SOURCES_OF, (ids,))} if ids else {}
    places: dict[str, list[int]] = {}  # source: [places, wanted, missed]
    for relevant, top in answers:
        wanted = set(relevant)
        for record_id in top[:3]:
            if (source := source_of.get(record_id)) is not None:
                figures = places.setdefault(source, [0, 0, 0])
                figures[0] += 1
                figures[1] += record_id in wanted
        for record_id in wanted - set(top[:3]):
            if (source := source_of.get(record_id)) is not None:
                places.setdefault(source, [0, 0, 0])[2] += 1
    enabled = {count.source: count.enabled for count in registry_sources(conn)} if places else {}
    found = [SourcePlaces(source, enabled.get(source, 0), *figures) for source, figures in places.items()]
    return sorted(found, key=lambda f: (-f.places, f.source))


def places_lines(by_source: Sequence[SourcePlaces], queries: int, model: str | None = None) -> list[str]:
    """The figures of each source as a table (of model's answers, where two are compared); nothing without any."""
    if not by_source:
        return []
    width = max(len("source"), *(len(f.source) for f in by_source))
    lines = [
        f"by source{f', {model}' if model else ''}: the top-three places of {queries} quer{'y' if queries == 1 else 'ies'} ({3 * queries} at most):",
        f"{'source':<{width}} {'enabled':>7} {'places':>6} {'wanted':>6} {'unwanted':>8} {'missed':>6}",
    ]
    lines += [f"{f.source:<{width}} {f.enabled:>7} {f.places:>6} {f.wanted:>6} {f.unwanted:>8} {f.missed:>6}" for f in by_source]
    return lines
