"""The registry's embedding model (payrail.embedding_model): the one place the package reads it."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from .embedders import Embedder


@dataclass(frozen=True)
class EmbeddingModel:
    name: str
    dimensions: int


class RegistryModelMismatch(Exception):
    """The embedder is configured for another model than the registry's."""


def registry_model(conn: psycopg.Connection) -> EmbeddingModel | None:
    """The model every stored and query vector must come from; None until the first vector is saved."""
    row = conn.execute("select name, dimensions from payrail.get_embedding_model()").fetchone()
    return EmbeddingModel(*row) if row else None


def require_embedder_model(conn: psycopg.Connection, embedder: Embedder) -> EmbeddingModel | None:
    """Refuses before any embedding request when the embedder would make vectors of another model."""
    model = registry_model(conn)
    if model is not None and model.name != embedder.model_name:
        raise RegistryModelMismatch(
            f"the registry uses model {model.name} ({model.dimensions} dimensions) but the embedder is configured "
            f"for {embedder.model_name}; set PAYRAIL_EMBEDDER / PAYRAIL_EMBEDDING_MODEL to the registry's model, "
            "or change the registry's model with `payrail-embedder model switch`"
        )
    return model


def adopt_embedder_model(conn: psycopg.Connection, embedder: Embedder, dimensions: int) -> None:
    """Makes the embedder's model the registry's when none is set yet (the first vector saved chooses it).

    Call it in the transaction that saves the vectors: payrail.set_embedding_model refuses (PYE02)
    a model other than one that already has vectors.
    """
    model = require_embedder_model(conn, embedder)
    if model is None or model.dimensions != dimensions:
        conn.execute("select payrail.set_embedding_model(%s, %s)", (embedder.model_name, dimensions))
