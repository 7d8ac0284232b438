"""One match as the contract's JSON, declared once: Match.to_json returns it (the CLI's --json), and
the MCP tool's output schema is built from it, where clients read its name and description. Its
own module so that its name can be the one agents read, Match, beside search.Match, the answer's
read-only dict."""

# pydantic (the MCP server's output schema) needs typing_extensions.TypedDict before Python 3.12.
from typing_extensions import TypedDict


class Match(TypedDict):
    """One provider method: an advisory guide, not an approval or a callable capability."""

    provider: str
    method: str
    urls: list[str]
    docsUrl: str | None
    guidance: str
