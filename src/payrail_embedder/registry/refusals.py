"""Why a record was refused, in the operator's words: every rule it breaks, each with its fields,
the rule and what to do, as the database states them (payrail.rules, payrail.check_provider_method).

The one place the write path turns a refusal into words, so the backoffice, `edit`, the import
report and the CLI all say the same, and never PostgreSQL's own constraint text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import psycopg

from .records import JSON_NAME_OF_COLUMN, ProviderMethod


@dataclass(frozen=True)
class BrokenRule:
    """One rule a record breaks."""

    # The JSON names of the fields it is about (empty: none in particular).
    fields: tuple[str, ...]
    # The rule in words, written to follow the field's name ("must be ...").
    rule: str
    # What to do about it.
    remedy: str
    # The constraint or unique index that enforces it: what psql's error names.
    constraint: str | None = None

    def describe(self, names: Mapping[str, str] = MappingProxyType({})) -> str:
        """ "docsUrl: must be ... Write ... (constraint)", each field by its name in names (its JSON
        name when names has none), and the constraint's name for psql users."""
        subject = " and ".join(names.get(field, field) for field in self.fields)
        text = f"{subject}: {self.rule}" if subject else self.rule[:1].upper() + self.rule[1:]
        return f"{text}. {self.remedy}".strip() + (f" ({self.constraint})" if self.constraint else "")

    def in_words(self) -> str:
        """The rule and what to do, without the field's name: what a page shows next to the field."""
        return f"{self.rule[:1].upper()}{self.rule[1:]}. {self.remedy}".strip()


def reason(rules: tuple[BrokenRule, ...]) -> str:
    """Every broken rule in one line."""
    return "; ".join(rule.describe() for rule in rules)


def unstorable(problems: list[tuple[str, str]]) -> tuple[BrokenRule, ...]:
    """records.unstorable_fields' text PostgreSQL cannot even be sent, as broken rules."""
    return tuple(BrokenRule((field,), text.removeprefix(f"{field} "), "Remove it.") for field, text in problems)


CHECK = "select constraint_name, fields, rule, remedy from payrail.check_provider_method(%s, %s, %s, %s, %s, %s, %s)"
RULE_OF_CONSTRAINT = "select fields, rule, remedy from payrail.rules where constraint_name = %s"


def _json_names(columns: list[str]) -> tuple[str, ...]:
    return tuple(JSON_NAME_OF_COLUMN[c] for c in columns if c in JSON_NAME_OF_COLUMN)


def broken_rules(conn: psycopg.Connection, error: psycopg.Error, record_id: int | None, record: ProviderMethod) -> tuple[BrokenRule, ...]:
    """Every rule the record breaks, for an error with which the database refused it.

    record_id: the record the values were saved as (None: a new one). The database judges every
    field at once (payrail.check_provider_method); a refusal that is not about a field's value
    (an enabled record without a vector, say) is put in the words payrail.rules has for the
    constraint it names, or failing those, in the database's message and hint.
    """
    if not conn.broken:
        rows = conn.execute(
            CHECK,
            (record_id, record.provider, record.method, list(record.urls), record.docs_url, record.guidance, record.mixed_scripts),
        ).fetchall()
        found = tuple(BrokenRule(_json_names(fields), rule, remedy, name) for name, fields, rule, remedy in rows)
        if found:
            order = list(JSON_NAME_OF_COLUMN.values())
            return tuple(sorted(found, key=lambda r: min((order.index(f) for f in r.fields), default=len(order))))
        known = conn.execute(RULE_OF_CONSTRAINT, (error.diag.constraint_name,)).fetchone()
        if known is not None:
            fields, rule, remedy = known
            return (BrokenRule(_json_names(fields), rule, remedy, error.diag.constraint_name),)
    diag = error.diag
    fields = _json_names([diag.column_name]) if diag.column_name else ()
    message = diag.message_primary or str(error).strip()
    return (BrokenRule(fields, message[:1].lower() + message[1:], diag.message_hint or "", diag.constraint_name),)
