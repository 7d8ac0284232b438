"""Why a record was refused, in the operator's words: every rule it breaks, each with its fields,
the rule and what to do, as the database states them (payrail.rules, payrail.check_provider_method).

The one place the write path turns a refusal into words (payrail.save_provider_methods' rules), so the backoffice, `edit`, the import
report and the CLI all say the same, and never PostgreSQL's own constraint text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .records import JSON_NAME_OF_COLUMN


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


def rules_of(rules: list[dict]) -> tuple[BrokenRule, ...]:
    """The rules of a refusal as payrail.save_provider_methods answers them ({"constraint", "fields",
    "rule", "remedy"}, fields by column), each field by its JSON name, in the order of the fields."""
    order = list(JSON_NAME_OF_COLUMN.values())
    found = [
        BrokenRule(tuple(JSON_NAME_OF_COLUMN[f] for f in rule["fields"] if f in JSON_NAME_OF_COLUMN), rule["rule"], rule["remedy"], rule["constraint"])
        for rule in rules
    ]
    return tuple(sorted(found, key=lambda r: min((order.index(f) for f in r.fields), default=len(order))))
