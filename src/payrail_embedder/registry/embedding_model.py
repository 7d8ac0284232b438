"""The registry's embedding model (payrail.embedding_model): the one place the package reads it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg

from ..base.errors import CodedError
from ..embedders import Embedder, EmbeddingUnavailable
from ..postgres.connection import SelfPinned


@dataclass(frozen=True)
class EmbeddingModel:
    name: str
    dimensions: int


class RegistryModelMismatch(CodedError):
    """The embedder is configured for another model than the registry's."""

    code = "misconfigured"


def registry_model(conn: psycopg.Connection) -> EmbeddingModel | None:
    """The model every stored and query vector must come from; None until the first vector is saved."""
    row = conn.execute(SelfPinned("select name, dimensions from payrail.get_embedding_model()")).fetchone()
    return EmbeddingModel(*row) if row else None


# What PYE01's detail says of the registry's model (payrail._search, db/functions/200-search.sql).
_MODEL_DETAIL = re.compile(r"The registry's embedding model is (?P<name>.+) \((?P<dimensions>\d+) dimensions\)\.", re.DOTALL)
_NO_MODEL_DETAIL = "The registry has no embedding model yet."


def model_of_embedding_required(conn: psycopg.Connection, error: psycopg.Error) -> EmbeddingModel | None:
    """The registry's model, as the name path's PYE01 names it in its detail (no statement of its
    own); asked with registry_model only of a registry whose db/ predates that detail."""
    detail = error.diag.message_detail or ""
    if detail == _NO_MODEL_DETAIL:
        return None
    named = _MODEL_DETAIL.fullmatch(detail)
    if named is None:
        return registry_model(conn)
    return EmbeddingModel(named["name"], int(named["dimensions"]))


def embedder_for(model: EmbeddingModel | None, embedder: Embedder) -> Embedder:
    """The embedder that makes vectors of the registry's model: a local embedder configured with no
    model follows the registry's tuned model (LocalEmbedder.for_registry_model); others are themselves."""
    return embedder.for_registry_model(model.name) if model is not None else embedder


def require_embedder_model(conn: psycopg.Connection, embedder: Embedder) -> Embedder:
    """The embedder to make the registry's vectors with (embedder_for); refused before any embedding
    request when it would make vectors of another model."""
    model = registry_model(conn)
    embedder = embedder_for(model, embedder)
    refuse_another_model(model, embedder)
    return embedder


def refuse_another_model(model: EmbeddingModel | None, embedder: Embedder) -> EmbeddingModel | None:
    """The model-mismatch rule, stated once: RegistryModelMismatch when embedder makes vectors of
    another model than the registry's (model; None: it has none yet, so any will do). Search
    reports it to agents as search_unavailable (model_mismatch)."""
    if model is not None and model.name != embedder.model_name:
        raise RegistryModelMismatch(
            f"the registry uses model {model.name} ({model.dimensions} dimensions) but the embedder is configured "
            f"for {embedder.model_name}; set PAYRAIL_EMBEDDER / PAYRAIL_EMBEDDING_MODEL to the registry's model, "
            "or change the registry's model with `payrail-embedder model switch`"
        )
    return model


def refuse_other_dimensions(model: EmbeddingModel | None, embedder: Embedder, dimensions: int) -> None:
    """EmbeddingUnavailable when the embedding service returned vectors of other dimensions than
    the registry's model has: the service's failure, not the database's (which would refuse them)."""
    if model is not None and dimensions != model.dimensions:
        raise EmbeddingUnavailable(
            f"{embedder.model_name} returned a {dimensions}-dimensional embedding, but the registry's model has {model.dimensions} dimensions"
        )
