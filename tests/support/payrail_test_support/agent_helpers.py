"""A small catalog that the openai-backend and agent-interface tests (API, MCP, parity) share, the
answers it must give, and an MCP client of the real `payrail-embedder mcp` subprocess.

Expected orders come from payrail_test_support.ranking, never written down.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path
from typing import TextIO

from payrail_embedder.embedders import OpenAIEmbedder
from payrail_embedder.postgres import connection
from payrail_embedder.registry import catalog
from payrail_embedder.registry.records import read_lines
from payrail_test_support import CLI, REPO
from payrail_test_support.cli import write_jsonl
from payrail_test_support.openai_fake import FAKE_MODEL
from payrail_test_support.ranking import fake_semantic_path, name_path

MATCH_KEYS = ("provider", "method", "urls", "docsUrl", "guidance")

CATALOG = [
    {
        "provider": "Stripe",
        "method": "Create a PaymentIntent",
        "urls": ["https://api.stripe.com/v1/payment_intents"],
        "docsUrl": "https://docs.stripe.com/api/payment_intents/create",
        "guidance": "Purpose: Charge a customer card in a chosen currency.\n"
        "Instructions: POST /v1/payment_intents with amount and currency.\n"
        "Notes: Payment requirements go to the payment agent.",
        "enabled": True,
    },
    {
        "provider": "Stripe",
        "method": "Create a refund",
        "urls": ["https://api.stripe.com/v1/refunds"],
        "docsUrl": "https://docs.stripe.com/api/refunds/create",
        "guidance": "Purpose: Give money back for an earlier charge.\nInstructions: POST /v1/refunds with the payment intent.\nNotes: Refunds settle in days.",
        "enabled": True,
    },
    {
        "provider": "Twilio",
        "method": "Send an SMS",
        "urls": ["https://api.twilio.com/2010-04-01/Accounts"],
        "docsUrl": "https://www.twilio.com/docs/messaging/api/message-resource",
        "guidance": "Purpose: Send a text message to a mobile phone number.\n"
        "Instructions: POST the Messages resource with To, From and Body.\n"
        "Notes: Billed per message segment.",
        "enabled": True,
    },
    {
        "provider": "Booking.com",
        "method": "Get accommodation availability",
        "urls": ["https://demandapi.booking.com/3.1/accommodations/availability"],
        "docsUrl": "https://developers.booking.com/demand/docs/open-api/demand-api/accommodations",
        "guidance": "Purpose: Live hotel availability and room prices for given dates.\n"
        "Instructions: POST /accommodations/availability with hotel ids, checkin and checkout.\n"
        "Notes: Paid partner API.",
        "enabled": True,
    },
    {
        "provider": "OpenWeather",
        "method": "Current weather data",
        "urls": [],
        "docsUrl": None,
        "guidance": "Purpose: Current weather conditions for a city or coordinates.\n"
        "Instructions: GET /data/2.5/weather with q or lat and lon.\n"
        "Notes: Free tier with a daily call limit.",
        "enabled": True,
    },
    {
        "provider": "Duffel",
        "method": "Stays: Search accommodation",
        "urls": ["https://api.duffel.com/stays/search"],
        "docsUrl": "https://duffel.com/docs/api/v2/search",
        "guidance": "Purpose: Search hotel rooms to book for a location and dates.\n"
        "Instructions: POST /stays/search with check in date, check out date and guests.\n"
        "Notes: Paid API with per-booking fees.",
        "enabled": True,
    },
    {
        # Closest of all to the hotel query, but a disabled draft: no interface may show it.
        "provider": "Amadeus",
        "method": "Hotel Search",
        "urls": ["https://api.amadeus.com/v3/shopping/hotel-offers"],
        "docsUrl": "https://developers.amadeus.com/self-service/category/hotels",
        "guidance": "Purpose: Find live hotel availability through a paid API.\nInstructions: GET hotel offers.\nNotes: Disabled draft.",
        "enabled": False,
    },
]

SEMANTIC_QUERY = "find live hotel availability through a paid API"
# Name path: a provider, a "provider / method" pair (any case and spacing), a method name.
NAME_QUERIES = ["Stripe", "  twilio /   SEND an sms ", "Create a refund"]
SEMANTIC_QUERIES = [SEMANTIC_QUERY, "give money back to a customer", "text message to a phone"]


def as_match(record: dict) -> dict:
    return {key: record[key] for key in MATCH_KEYS}


def expected_semantic_matches(query: str) -> list[dict]:
    """The semantic path's answer over CATALOG, as search shows it."""
    return [as_match(record) for record in fake_semantic_path(CATALOG, query)]


def expected_name_matches(query: str) -> list[dict]:
    """The name path's answer over CATALOG, as search shows it."""
    return [as_match(record) for record in name_path(CATALOG, query)]


def import_catalog(database_url: str, openai_fake, directory: Path, records: list[dict] = CATALOG) -> None:
    """Imports records (CATALOG unless told) as `payrail-embedder import` does, in process (a
    subprocess per test costs seconds), embedding with the fake OpenAI server over HTTP.
    """
    path = write_jsonl(directory / "agent-catalog.jsonl", records)

    def embedder():
        return OpenAIEmbedder(FAKE_MODEL, api_key="test-key", base_url=openai_fake.base_url)

    with connection.connect(database_url, autocommit=True) as conn:
        report = catalog.import_records(conn, embedder, read_lines(path))
    assert (report.created + report.updated + report.unchanged, report.refused, report.saved) == (len(records), [], True)


@asynccontextmanager
async def mcp_client(env: dict[str, str], errlog: TextIO):
    """The SDK's own client, talking over stdio to `payrail-embedder mcp` started with env."""
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    parameters = StdioServerParameters(command=str(CLI), args=["mcp"], env=env, cwd=REPO)
    async with Client(stdio_client(parameters, errlog=errlog), read_timeout_seconds=60) as client:
        yield client
