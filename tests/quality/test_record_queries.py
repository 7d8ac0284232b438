"""The queries `model tune --record-pairs` makes from a registry's records alone (tuning_data.record_queries),
read from a real registry: each enabled record's Purpose line, answered by that record.

The expected queries are written out by hand from the catalog below, never computed by the code
under test. No model is trained here (tests/quality/test_tune.py trains on them).
"""

from __future__ import annotations

from payrail_embedder.postgres.connection import connect
from payrail_embedder.quality import tuning_data
from payrail_test_support.cli import cli_import


def record(provider: str, method: str, guidance: str, enabled: bool = True) -> dict:
    return {"provider": provider, "method": method, "urls": [], "docsUrl": None, "guidance": guidance, "enabled": enabled}


LONG = "Convert " + "currency amounts " * 150  # 2,558 characters: over a query's 2,000
CATALOG = [
    record("Twilio", "Send an SMS", "Purpose: Send a text message to a phone.\nInstructions: POST /Messages.\nNotes: Paid per message."),
    # The Purpose line need not come first; the label's spacing and the line's trailing blanks are dropped.
    record("Twilio", "Lookup", "Instructions: GET /PhoneNumbers/{number}.\nPurpose:\tCheck a phone number's carrier.  \nNotes: -"),
    # The same line twice: one query, answered by both records, over both providers.
    record("Stripe", "Create a refund", "Purpose: Give money back for an earlier charge."),
    record("Adyen", "Refund a payment", "Purpose: Give money back for an earlier charge.\nNotes: Adyen's refunds."),
    # No Purpose line, an empty one, one that only mentions the word, a draft: no query.
    record("Acme Maps", "Geocode", "Turn an address into coordinates."),
    record("Acme Maps", "Reverse geocode", "Purpose:\nInstructions: GET /reverse."),
    record("Acme Maps", "Tiles", "Notes: Purpose: not the template's line."),
    record("Amadeus", "Hotel Search", "Purpose: Find hotels.", enabled=False),
    # Cut at a query's 2,000 characters.
    record("Fixer", "Convert", f"Purpose: {LONG}"),
]


def test_each_enabled_record_s_purpose_line_is_a_query_its_record_answers(cli_env, database_url, tmp_path):
    cli_import(cli_env, tmp_path / "catalog.jsonl", CATALOG)

    with connect(database_url) as conn:
        made = tuning_data.record_queries(conn)

    by_query = {q.labelled.query: q for q in made}
    assert {query: (set(q.labelled.relevant), q.providers) for query, q in by_query.items()} == {
        "Send a text message to a phone.": ({("Twilio", "Send an SMS")}, {"twilio"}),
        "Check a phone number's carrier.": ({("Twilio", "Lookup")}, {"twilio"}),
        "Give money back for an earlier charge.": ({("Stripe", "Create a refund"), ("Adyen", "Refund a payment")}, {"stripe", "adyen"}),
        LONG.rstrip()[:2000]: ({("Fixer", "Convert")}, {"fixer"}),
    }
    assert len(made) == len(by_query)
    refund = by_query["Give money back for an earlier charge."]
    assert {(p, m, g) for p, m, g in refund.records} == {(r["provider"], r["method"], r["guidance"]) for r in CATALOG[2:4]}
    # Trained as golden queries are: each query against the text the registry embeds for each of its records.
    assert tuning_data.training_pairs([by_query["Send a text message to a phone."]]) == [
        ("Send a text message to a phone.", "Twilio: Send an SMS\n" + CATALOG[0]["guidance"])
    ]
