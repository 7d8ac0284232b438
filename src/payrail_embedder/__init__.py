"""Payrail Agent Search: the embedder and command line of the provider-method registry."""

from .faces.api import InvalidQuery, Match, Registry, SearchResult, SearchUnavailable, search_provider_methods

__all__ = ["InvalidQuery", "Match", "Registry", "SearchResult", "SearchUnavailable", "search_provider_methods"]
