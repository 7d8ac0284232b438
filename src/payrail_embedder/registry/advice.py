"""Advice on the editorial template: how a record's guidance and docs URL fit the seed's template
(a Purpose line that says what the method does, Instructions, Notes, plain text, a docs URL).

Advice, never a rule: it refuses no save and changes no search, and agents never see it. The
database holds every rule (db/functions/180-template_advice.sql), so psql, `show`, `advise`,
`import`'s summary and the backoffice give the same answer; this module only asks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import psycopg

from ..base.errors import CodedError
from ..base.reports import Report
from ..postgres.connection import one_value
from .records import ProviderMethod


class UnknownAdvice(CodedError):
    """A piece of advice the registry does not give."""

    code = "invalid_input"


@dataclass(frozen=True)
class Advice:
    """One piece of advice on one record: its stable code, the advice in words, what to do."""

    code: str
    advice: str
    fix: str

    def to_json(self) -> dict:
        return {"code": self.code, "advice": self.advice, "fix": self.fix}


@dataclass(frozen=True)
class AdviceCount:
    """How many records get one piece of advice (payrail.count_template_advice)."""

    code: str
    # What they have, to follow "N records have": "no Purpose line".
    summary: str
    fix: str
    enabled: int
    drafts: int

    @property
    def records(self) -> int:
        return self.enabled + self.drafts

    def in_words(self) -> str:
        """ "412 records have no Purpose line (no_purpose)"."""
        return f"{self.records:,} record{' has' if self.records == 1 else 's have'} {self.summary} ({self.code})"

    def to_json(self) -> dict:
        return {"code": self.code, "summary": self.summary, "fix": self.fix, "enabled": self.enabled, "drafts": self.drafts}


def advice_on(conn: psycopg.Connection, record: ProviderMethod) -> list[Advice]:
    """The advice on a record's fields as they are, saved or not (a form as typed)."""
    rows = conn.execute(
        "select code, advice, fix from payrail.advise_provider_method(%s, %s, %s, %s)",
        (record.provider, record.method, record.guidance, record.docs_url),
    )
    return [Advice(*row) for row in rows]


def counts(conn: psycopg.Connection, record_ids: Sequence[int] | None = None) -> list[AdviceCount]:
    """Every piece of advice with how many records get it, zero included: over every record, or those of record_ids."""
    rows = conn.execute("select * from payrail.count_template_advice(%s::bigint[])", (None if record_ids is None else list(record_ids),))
    return [AdviceCount(*row) for row in rows]


def codes(conn: psycopg.Connection) -> list[str]:
    """The codes of every piece of advice, in the order advice is listed."""
    return [code for (code,) in conn.execute("select code from payrail.get_template_advice_kinds()")]


def check_code(conn: psycopg.Connection, code: str) -> str:
    """code, when the registry gives that advice; UnknownAdvice naming the codes otherwise."""
    known = codes(conn)
    if code not in known:
        raise UnknownAdvice(f"there is no advice {code!r}: the codes are {', '.join(known)}")
    return code


@dataclass
class AdvisedRecord:
    """A stored record and the advice on it."""

    record_id: int
    provider: str
    method: str
    enabled: bool
    advice: list[Advice] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "recordId": self.record_id,
            "provider": self.provider,
            "method": self.method,
            "enabled": self.enabled,
            "advice": [item.to_json() for item in self.advice],
        }


def advised_records(conn: psycopg.Connection, record_ids: Sequence[int] | None = None, code: str | None = None) -> list[AdvisedRecord]:
    """The records (every one, or those of record_ids) that get advice, or the advice code, each
    with all its advice, by provider and method ignoring case (payrail.advise_provider_methods)."""
    found: dict[int, AdvisedRecord] = {}
    rows = conn.execute(
        "select record_id, provider, method, enabled, code, advice, fix from payrail.advise_provider_methods(%s::bigint[])",
        (None if record_ids is None else list(record_ids),),
    )
    for record_id, provider, method, enabled, *advice in rows:
        found.setdefault(record_id, AdvisedRecord(record_id, provider, method, enabled)).advice.append(Advice(*advice))
    return [record for record in found.values() if code is None or any(item.code == code for item in record.advice)]


def checked(conn: psycopg.Connection, record_ids: Sequence[int] | None = None) -> int:
    """How many records advice is asked about: every record, or those of record_ids that exist."""
    if record_ids is None:
        return one_value(conn.execute("select pg_catalog.count(*) from payrail.provider_methods"))
    return one_value(conn.execute("select pg_catalog.count(*) from payrail.provider_methods where id = any(%s::bigint[])", (list(record_ids),)))


def clock(conn: psycopg.Connection) -> datetime:
    """The database's clock now: where an import starts, for saved_since."""
    return one_value(conn.execute("select pg_catalog.clock_timestamp()"))


def saved_since(conn: psycopg.Connection, started: datetime) -> list[AdviceCount] | None:
    """The advice counts over the records this login saved (created or changed) since started (by
    the database's clock): an import's records, computed after it from what it saved, so the
    import itself knows nothing of advice. A record the same login saved elsewhere meanwhile
    counts too. None when the database cannot say (the import's own report stands)."""
    try:
        ids = [
            record_id
            for (record_id,) in conn.execute(
                "select id from payrail.provider_methods where updated_at >= %s and saved_by = payrail._author()",
                (started,),
            )
        ]
        return counts(conn, ids)
    except psycopg.Error:
        return None


def advice_lines(advice: Sequence[Advice]) -> list[str]:
    """The advice on one record for people (`show`): each piece and what to do, or that it fits."""
    if not advice:
        return ["advice: none, it fits the editorial template"]
    lines = ["advice on the editorial template (it never blocks a save; agents never see it):"]
    for item in advice:
        lines += [f"   {item.code}: {item.advice}", f"      {item.fix}"]
    return lines


def summary_lines(advice: Sequence[AdviceCount]) -> list[str]:
    """One line per piece of advice some records get: what import's report ends with."""
    return [f"advice: {count.in_words()}" for count in advice if count.records]


@dataclass
class AdviceReport(Report):
    """`advise`: the records that get advice, each with it, and how many get each piece."""

    records: list[AdvisedRecord]
    counts: list[AdviceCount]
    # How many records were checked: every record, or those named.
    checked: int
    # Only the counts, not each record (--summary).
    summary_only: bool = False

    def to_json(self) -> dict:
        answer = {"checked": self.checked, "counts": [count.to_json() for count in self.counts]}
        if not self.summary_only:
            answer["records"] = [record.to_json() for record in self.records]
        return answer

    def describe(self) -> list[str]:
        lines = []
        if not self.summary_only:
            for record in self.records:
                lines.append(f"{record.provider} / {record.method} (record {record.record_id}, {'enabled' if record.enabled else 'draft'})")
                lines += [f"   {item.code}: {item.advice}" for item in record.advice]
        checked = f"{self.checked:,} record{'' if self.checked == 1 else 's'} checked against the editorial template"
        advised = [count for count in self.counts if count.records]
        if not advised:
            return [*lines, f"{checked}: every one fits it"]
        lines.append(f"{checked} (advice never blocks a save; agents never see it):")
        for count in advised:
            lines += [f"{count.in_words()}: {count.enabled:,} enabled, {count.drafts:,} draft{'' if count.drafts == 1 else 's'}", f"   {count.fix}"]
        return lines
