"""What search would answer if a draft were enabled (payrail.preview_search), for operators."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from .embedders import Embedder
from . import errcodes
from .search import _as_match

PREVIEW_SQL = "select provider, method, urls, docs_url, guidance from payrail.preview_search(%s, %s, %s, %s, %s)"


class UnknownDraft(Exception):
    """The --draft name matches no record, or more than one."""


def resolve_draft(conn: psycopg.Connection, name: str) -> tuple[str, str]:
    """The (provider, method) of the record named "Provider / Method", compared as the name path compares."""
    rows = conn.execute(
        """
        select provider, method from payrail.provider_methods
        where payrail._normalize_name(provider || ' / ' || method) = payrail._normalize_name(%s)
        order by payrail._normalize_name(provider), payrail._normalize_name(method)
        """,
        (name,),
    ).fetchall()
    if not rows:
        raise UnknownDraft(f'no provider method is named "{name}"; write it as "Provider / Method"')
    if len(rows) > 1:
        names = ", ".join(f'"{provider}" + "{method}"' for provider, method in rows)
        raise UnknownDraft(f'"{name}" names several records ({names}); pick one with `psql` and preview_search')
    return rows[0]


def preview_search(
    conn: psycopg.Connection, embedder_factory: Callable[[], Embedder], provider: str, method: str, query: str
) -> list[dict]:
    """Like search: the name path first, without the embedder; the query is embedded only when needed.

    conn must be in autocommit mode (the first attempt may fail with PYE01).
    """
    try:
        return [_as_match(row) for row in conn.execute(PREVIEW_SQL, (provider, method, query, None, None)).fetchall()]
    except psycopg.Error as error:
        if error.sqlstate != errcodes.QUERY_EMBEDDING_REQUIRED:
            raise
    embedder = embedder_factory()
    vector = embedder.embed([query])[0]
    rows = conn.execute(PREVIEW_SQL, (provider, method, query, vector, embedder.model_name)).fetchall()
    return [_as_match(row) for row in rows]
