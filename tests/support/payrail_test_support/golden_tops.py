"""What eval gets for every golden query of a registry: each put through the real search path
(evaluation.run_queries), the top three by name. The reference the tests hold the backoffice's
and the command line's golden query rankings to."""

from __future__ import annotations

from payrail_embedder.embedders import OpenAIEmbedder
from payrail_embedder.postgres.connection import connect
from payrail_embedder.quality.evaluation import run_queries
from payrail_embedder.registry import golden


def eval_tops(database_url: str, env: dict[str, str]) -> dict[str, list[str]]:
    """Golden query -> its top three as "Provider / Method", eval's way, with the embedder env names."""

    def embedder():
        return OpenAIEmbedder(env["PAYRAIL_EMBEDDING_MODEL"], api_key=env["OPENAI_API_KEY"], base_url=env["OPENAI_BASE_URL"])

    with connect(database_url, autocommit=True) as conn:
        results = run_queries(conn, embedder, golden.labelled_queries(conn))
    return {r.labelled.query: [f"{m.provider} / {m.method}" for m in r.returned] for r in results}
