"""The registry's embedding model (payrail.embedding_model): the one place the package reads it."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from .connection import SelfPinned
from .embedders import Embedder
from .errors import CodedError


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


def embedder_for(model: EmbeddingModel | None, embedder: Embedder) -> Embedder:
    """The embedder that makes vectors of the registry's model: a local embedder configured with no
    model follows the registry's tuned model (LocalEmbedder.for_registry_model); others are themselves."""
    follow = getattr(embedder, "for_registry_model", None)
    return follow(model.name) if follow is not None and model is not None else embedder


def require_embedder_model(conn: psycopg.Connection, embedder: Embedder) -> Embedder:
    """The embedder to make the registry's vectors with (embedder_for); refused before any embedding
    request when it would make vectors of another model."""
    model = registry_model(conn)
    embedder = embedder_for(model, embedder)
    _refuse_another_model(model, embedder)
    return embedder


def _refuse_another_model(model: EmbeddingModel | None, embedder: Embedder) -> EmbeddingModel | None:
    if model is not None and model.name != embedder.model_name:
        raise RegistryModelMismatch(
            f"the registry uses model {model.name} ({model.dimensions} dimensions) but the embedder is configured "
            f"for {embedder.model_name}; set PAYRAIL_EMBEDDER / PAYRAIL_EMBEDDING_MODEL to the registry's model, "
            "or change the registry's model with `payrail-embedder model switch`"
        )
    return model


def adopt_embedder_model(conn: psycopg.Connection, embedder: Embedder, dimensions: int) -> None:
    """Locks the registry's model for this transaction's vector writes and checks it is the
    embedder's; makes it the registry's when none is set yet (the first vector saved chooses it).

    Call it first in the transaction that saves vectors, before any record is locked: every vector
    write takes this lock (tg_provider_methods__keep_embedding_current), and a model switch takes
    it before the records, so taking it first is the lock order that never deadlocks with a switch.
    payrail.set_embedding_model refuses (PYE02) another model than one that already has vectors.
    """
    row = conn.execute("select name, dimensions from payrail.embedding_model for share").fetchone()
    model = _refuse_another_model(EmbeddingModel(*row) if row else None, embedder)
    if model is None or model.dimensions != dimensions:
        conn.execute("select payrail.set_embedding_model(%s, %s)", (embedder.model_name, dimensions))
