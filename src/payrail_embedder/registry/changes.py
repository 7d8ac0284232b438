"""A change of a record and what became of it: the write path's words, and how
payrail.save_provider_methods reads a change (as JSON) and says what became of it (its answer's rows)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import refusals
from .records import ProviderMethod


@dataclass(frozen=True)
class Change:
    """Save these public fields (and enabled, None: keep it) for one record."""

    record: ProviderMethod
    # None: the record with the same provider and method (compared as the unique key compares), or a new one.
    record_id: int | None = None
    # The version the caller read and showed: a save over another version is a Conflict. 0: the
    # record must be new. None: no check (import: whatever is stored under the name is replaced).
    expected_version: int | None = None


@dataclass(frozen=True)
class AsStored:
    """A record as it is stored, to embed it (sync) or to enable or disable it (enabled; None: keep)."""

    record_id: int
    enabled: bool | None = None


@dataclass(frozen=True)
class Embedding:
    """A vector made for a change's text by model, and the content hash of that text (the answer's)."""

    vector: np.ndarray
    model: str
    content_hash: bytes


@dataclass(frozen=True)
class Saved:
    record_id: int
    version: int
    outcome: str  # "created", "updated" or "unchanged"
    embedded: bool
    # The record as saved: its names as stored, its state, and whether it has a current vector.
    provider: str = ""
    method: str = ""
    enabled: bool = False
    has_current_vector: bool = False


@dataclass(frozen=True)
class Refused:
    """Rules refused the change; nothing of it was saved."""

    reason: str
    # The JSON names of the fields the rules are about (empty when they are about none in particular).
    fields: tuple[str, ...] = ()
    # For a change of the same record as an earlier change in the same save: that change's position.
    same_as: int | None = None
    # Every rule the change breaks, in words.
    rules: tuple[refusals.BrokenRule, ...] = ()

    @classmethod
    def of(cls, rules: tuple[refusals.BrokenRule, ...]) -> Refused:
        return cls(refusals.reason(rules), tuple(dict.fromkeys(f for rule in rules for f in rule.fields)), rules=rules)


@dataclass(frozen=True)
class Conflict:
    """The record is not at the version the caller read: saved by someone else meanwhile, or deleted."""

    reason: str


Unsaved = Refused | Conflict
Outcome = Saved | Unsaved
AnyChange = Change | AsStored


def as_json(change: AnyChange, embedding: Embedding | None) -> dict:
    """One payrail.provider_method_change, as payrail.provider_method_changes reads it from JSON."""
    if isinstance(change, AsStored):
        fields: dict = {"record_id": change.record_id, "enabled": change.enabled}
    else:
        record = change.record
        fields = {
            "record_id": change.record_id,
            "expected_version": change.expected_version,
            "provider": record.provider,
            "method": record.method,
            "urls": list(record.urls),
            "docs_url": record.docs_url,
            "guidance": record.guidance,
            "enabled": record.enabled,
            "mixed_scripts": record.mixed_scripts,
        }
    if embedding is not None:
        fields |= {"embedding_model": embedding.model, "embedding_content_hash": "\\x" + embedding.content_hash.hex()}
    return fields


def unsaved_of(answer: dict, positions: Sequence[int]) -> Unsaved:
    """The refusal or conflict an answer says; positions: each sent change's position for the caller."""
    if answer["outcome"] == "conflict":
        return Conflict(answer["reason"])
    if answer["same_as"] is not None:
        return Refused("the same record as an earlier change", ("provider", "method"), positions[answer["same_as"] - 1])
    return Refused.of(refusals.rules_of(answer["rules"]))


def saved_of(answer: dict, embedding: Embedding | None) -> Saved:
    return Saved(
        answer["record_id"],
        answer["record_version"],
        answer["outcome"],
        embedding is not None,
        answer["provider"],
        answer["method"],
        answer["enabled"],
        answer["has_current_vector"],
    )
