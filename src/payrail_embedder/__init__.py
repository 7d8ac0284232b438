"""Payrail Agent Search: the embedder and command line of the provider-method registry."""
