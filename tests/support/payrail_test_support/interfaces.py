"""Every interface of the package, driven the way its users drive it, for the tests that must reach
all of them (a hostile schema, PgBouncer): the CLI's commands in subprocesses, the Python API in
process, MCP over stdio and streamable HTTP (the SDK's client), and the backoffice over HTTP.

Each works on a registry holding agent_helpers.CATALOG, with the fake OpenAI server's model.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from pathlib import Path

import anyio

from payrail_embedder.api import Registry
from payrail_embedder.embedders import OpenAIEmbedder
from payrail_embedder.settings import Settings
from payrail_test_support import REPO
from payrail_test_support.agent_helpers import CATALOG, SEMANTIC_QUERY, mcp_client
from payrail_test_support.backoffice import HttpClient, http_sign_in, record_form
from payrail_test_support.cli import cli_json, run_cli, write_jsonl
from payrail_test_support.remote_agents import tool_answer

TOOL = "search_provider_methods"
FAKE_EDITOR = REPO / "tests" / "fake_editor.py"
DRAFT = next(record for record in CATALOG if not record["enabled"])


def draft_record(label: str) -> dict:
    """A new draft (invisible to agents) that operators' paths create, named uniquely by label."""
    return {
        "provider": "Pool Operator",
        "method": f"Draft {label}",
        "urls": [f"https://api.pool.example/{re.sub(r'[^a-z0-9]+', '-', label.lower())}"],
        "docsUrl": None,
        "guidance": f"Purpose: a draft saved by {label}.\nNotes: never enabled.",
        "enabled": False,
    }


# --- agents ----------------------------------------------------------------------------------------


def cli_answer(env: dict[str, str], query: str) -> dict:
    code, answer, stderr = cli_json(env, "search", "--json", query)
    assert code == 0, (answer, stderr)
    return answer


def api_registry(env: dict[str, str], **options) -> Registry:
    """A Registry configured as the CLI would be by env (whose OPENAI_API_KEY this process lacks)."""
    embedder = OpenAIEmbedder(env["PAYRAIL_EMBEDDING_MODEL"], api_key=env["OPENAI_API_KEY"], base_url=env["OPENAI_BASE_URL"])
    return Registry(settings=Settings.from_env(env), embedder=embedder, **options)


def mcp_stdio_answers(env: dict[str, str], queries: list[str], errlog_path: Path) -> list[dict]:
    """`payrail-embedder mcp` over stdio: each query's structured answer (or its error JSON)."""

    async def main():
        with open(errlog_path, "a") as errlog:
            async with mcp_client(env, errlog) as client:
                return [tool_answer(await client.call_tool(TOOL, {"query": query})) for query in queries]

    return anyio.run(main)


# --- operators -------------------------------------------------------------------------------------


def run_cli_commands(env: dict[str, str], tmp_path: Path, apply: bool = True) -> None:
    """Every command of the CLI that reads or changes the registry, each of which must exit 0:
    db apply (unless apply is false), import, sync, search (semantic and by name), preview,
    history, export, eval, edit, model show and db status. Changes only drafts, so agents'
    answers stay as they were."""
    label = uuid.uuid4().hex[:8]
    catalog = write_jsonl(tmp_path / f"catalog-{label}.jsonl", CATALOG)
    labelled = tmp_path / f"labelled-{label}.jsonl"
    labelled.write_text(json.dumps({"query": SEMANTIC_QUERY, "relevant": [["Booking.com", "Get accommodation availability"]]}) + "\n")
    record = f"{CATALOG[0]['provider']} / {CATALOG[0]['method']}"
    draft = f"{DRAFT['provider']} / {DRAFT['method']}"
    edit_env = editing(env, tmp_path / f"editor-{label}", DRAFT["guidance"], DRAFT["guidance"] + f" Edited {label}.")
    for command_env, args in [
        *([(env, ("db", "apply"))] if apply else []),
        (env, ("import", str(catalog))),
        (env, ("sync",)),
        (env, ("search", "--json", SEMANTIC_QUERY)),
        (env, ("search", "--json", CATALOG[0]["provider"])),
        (env, ("preview", "--json", SEMANTIC_QUERY, "--draft", draft)),
        (env, ("history", "--json", record)),
        (env, ("export",)),
        (env, ("eval", "--json", str(labelled))),
        (edit_env, ("edit", draft)),
        (env, ("model", "show", "--json")),
        (env, ("db", "status", "--json")),
    ]:
        result = run_cli(command_env, *args)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr, (args, result.stderr)


def editing(env: dict[str, str], directory: Path, old: str, new: str) -> dict[str, str]:
    """env with $EDITOR the fake editor (tests/fake_editor.py), which replaces old by new and saves."""
    directory.mkdir()
    (directory / "steps.json").write_text(json.dumps([{"replace": [old, new]}]))
    return {**env, "EDITOR": f"{sys.executable} {FAKE_EDITOR}", "FAKE_EDITOR_DIR": str(directory)}


class BackofficeOperator:
    """A backoffice session over HTTP: what an operator's browser posts, page by page."""

    def __init__(self, url: str, role: str, password: str) -> None:
        self.client = HttpClient(url)
        self.session = http_sign_in(self.client, role, password)

    def _post(self, path: str, form: dict):
        return self.client.post(path, {"csrf_token": self.session.token, **form}, headers={"Origin": self.client.origin}, cookies=self.session.cookies)

    def _get(self, path: str):
        reply = self.client.get(path, cookies=self.session.cookies)
        assert reply.status == 200, (path, reply.status, reply.body[:2000])
        return reply

    def create(self, record: dict) -> int:
        reply = self.client.post(
            "/records/new", record_form(record, 0, self.session.token), headers={"Origin": self.client.origin}, cookies=self.session.cookies
        )
        assert reply.status == 303, (reply.status, reply.body[:2000])
        return int(re.fullmatch(r"/records/(\d+)", reply.location).group(1))

    def version(self, record_id: int) -> int:
        return int(re.search(r'name="version" value="(\d+)"', self._get(f"/records/{record_id}").body).group(1))

    def save(self, record_id: int, record: dict) -> None:
        form = record_form(record, self.version(record_id), self.session.token)
        reply = self.client.post(f"/records/{record_id}", form, headers={"Origin": self.client.origin}, cookies=self.session.cookies)
        assert reply.status == 303, (reply.status, reply.body[:2000])

    def try_query(self, record_id: int, query: str) -> str:
        """The record page with Try a query: search as agents get it and with this record counted."""
        return self._get(f"/records/{record_id}?query={query.replace(' ', '+')}").body

    def restore_oldest(self, record_id: int) -> None:
        page = self._get(f"/records/{record_id}").body
        history_ids = re.findall(r'name="history_id" value="(\d+)"', page)
        reply = self._post(f"/records/{record_id}/restore", {"history_id": history_ids[-1], "version": str(self.version(record_id))})
        assert reply.status == 303, (reply.status, reply.body[:2000])

    def delete(self, record_id: int) -> None:
        reply = self._post(f"/records/{record_id}/delete", {"version": str(self.version(record_id))})
        assert reply.status == 303, (reply.status, reply.body[:2000])

    def import_lines(self, records: list[dict], filename: str) -> str:
        body = "".join(json.dumps(r) + "\n" for r in records).encode()
        reply = self.client.post_file(
            "/import",
            {"csrf_token": self.session.token},
            "file",
            filename,
            body,
            headers={"Origin": self.client.origin},
            cookies=self.session.cookies,
        )
        assert reply.status == 200, (reply.status, reply.body[:2000])
        return reply.body

    def export(self) -> str:
        return self._get("/export").body

    def records_page(self, text: str) -> str:
        return self._get(f"/records?q={text.replace(' ', '+')}").body

    def sign_out(self) -> None:
        reply = self._post("/sign-out", {})
        assert reply.status == 303, (reply.status, reply.body[:2000])


def backoffice_round(backoffice_url: str, role: str, password: str, label: str) -> list[str]:
    """One operator's visit: sign in, list, create a draft, try a query on it, save it, restore
    its first version, delete it, import a draft, export, sign out. Returns the exported lines."""
    operator = BackofficeOperator(backoffice_url, role, password)
    operator.records_page(CATALOG[0]["provider"])
    record = draft_record(f"backoffice {label}")
    record_id = operator.create(record)
    trial = operator.try_query(record_id, SEMANTIC_QUERY)
    assert "search_unavailable" not in trial, trial[:3000]
    operator.save(record_id, {**record, "guidance": record["guidance"] + " Saved again."})
    operator.restore_oldest(record_id)
    operator.delete(record_id)
    operator.import_lines([draft_record(f"backoffice import {label}")], f"drafts-{label}.jsonl")
    exported = operator.export().splitlines()
    operator.sign_out()
    return exported
