"""The Python API of the agent path: search_provider_methods(query=...) -> {"matches": [Match, ...]}.

    from payrail_embedder import search_provider_methods, SearchUnavailable, InvalidQuery

    try:
        answer = search_provider_methods(query="find live hotel availability through a paid API")
    except InvalidQuery as error:        # error.code == "invalid_query": fix the query
        ...
    except SearchUnavailable as error:   # error.code == "search_unavailable": try again later
        ...
    for match in answer["matches"]:
        print(match.provider, match.method, match.docsUrl)

A `Registry` (registry/agent_path.py) keeps one connection pool and one embedder for its
lifetime, so every call after the first costs one database round trip for an exact name, and two
for a need in plain words (the name path's answer names the model; the query's embedding; the
search with it). The module-level function uses a default Registry configured like the CLI, from the environment
(settings.Settings.from_env: PAYRAIL_DATABASE_URL, unset for the embedded PostgreSQL, and the
rest of the CLI's variables). The ordering, the name path and the input rules stay in the
database (payrail.search_provider_methods); this module only keeps what the CLI opens per call.
"""

from __future__ import annotations

import threading

from ..registry.agent_path import Registry, SearchResult
from ..registry.search import InvalidQuery, Match, SearchUnavailable

__all__ = ["InvalidQuery", "Match", "Registry", "SearchResult", "SearchUnavailable", "search_provider_methods"]


_default_registry: Registry | None = None
_default_lock = threading.Lock()


def default_registry() -> Registry:
    """The Registry behind the module-level function, created on first use from the environment."""
    global _default_registry
    with _default_lock:
        if _default_registry is None:
            try:
                _default_registry = Registry()
            except ValueError as error:  # a setting in the environment the CLI would refuse too
                raise SearchUnavailable(f"configuration: {error}", "configuration") from error
        return _default_registry


def search_provider_methods(query: str) -> SearchResult:
    """At most three provider methods for `query`, from the default Registry (configured by the
    environment, like the CLI). Raises InvalidQuery or SearchUnavailable; see Registry.
    """
    return default_registry().search_provider_methods(query)
