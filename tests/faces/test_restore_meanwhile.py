"""Restore while another operator deletes: the backoffice over real HTTP, two operators' sessions.

One operator opens a record's history, another deletes the record, the first restores a version:
it comes back as a new draft and the page says so (it answered HTTP 500), or, when its name was
taken meanwhile, nothing is restored and the page says why.
"""

from __future__ import annotations

import html
import re

import psycopg

from payrail_test_support.backoffice import ACME, ENABLED, OPERATOR, OTHER_OPERATOR, PASSWORD, confirmation, history, stored
from payrail_test_support.interfaces import BackofficeOperator
from payrail_test_support.logs import events_among

EDITED = ENABLED["guidance"].replace("paid per call", "paid per request")


def opened_history(operator: BackofficeOperator, record_id: int) -> dict:
    """What the record page's oldest Restore button posts, read as the operator's browser read it."""
    page = operator.client.get(f"/records/{record_id}", cookies=operator.session.cookies).body
    return {
        "history_id": re.findall(r'name="history_id" value="(\d+)"', page)[-1],
        "version": re.search(r'name="version" value="(\d+)"', page).group(1),
    }


def restore(operator: BackofficeOperator, record_id: int, form: dict):
    """The Restore button, then, when it asks, its confirmation page's Restore."""
    question = operator._post(f"/records/{record_id}/restore", form)
    if question.status != 200:
        return question
    assert "Not restored yet" in question.body, question.body[:3000]
    return operator._post(f"/records/{record_id}/restore", confirmation(question.body))


def followed(operator: BackofficeOperator, reply) -> str:
    """The page the browser shows after the redirect, with the session's message on it."""
    assert reply.status == 303, (reply.status, reply.body[:3000])
    page = operator.client.get(reply.location, cookies=operator.session.cookies)
    assert page.status == 200, (reply.location, page.status, page.body[:3000])
    return page.body


def deleted_by_another_operator(backoffice) -> tuple[BackofficeOperator, int, dict]:
    """ada edits the record and opens its history; eve deletes it: (ada, its id, ada's restore form)."""
    ada = BackofficeOperator(backoffice.url, OPERATOR, PASSWORD)
    eve = BackofficeOperator(backoffice.url, OTHER_OPERATOR, PASSWORD)
    record_id = int(re.search(r'href="/records/(\d+)"[^>]*>Acme Maps / Geocode an address<', ada.records_page("Geocode")).group(1))
    ada.save(record_id, {**ENABLED, "guidance": EDITED})
    form = opened_history(ada, record_id)
    eve.delete(record_id)
    return ada, record_id, form


def test_a_version_of_a_record_deleted_meanwhile_comes_back_as_a_new_draft_and_the_page_says_so(backoffice, database_url):
    ada, old_id, form = deleted_by_another_operator(backoffice)
    assert stored(database_url, *ACME) is None

    reply = restore(ada, old_id, form)
    restored = stored(database_url, *ACME)
    assert restored is not None and reply.location == f"/records/{restored['id']}", (reply.status, reply.location, reply.body[:3000])
    assert restored["id"] != old_id
    assert (restored["version"], restored["enabled"], restored["guidance"]) == (1, False, ENABLED["guidance"])
    page = followed(ada, reply)
    message = html.unescape(re.search(r'<p class="message info" role="status">([^<]*)</p>', page).group(1))
    assert message == (
        f'"Acme Maps / Geocode an address" was deleted meanwhile: version 1 is restored as a new record '
        f"{restored['id']}, a draft (agents find it once it is enabled); its content was embedded before it was saved."
    ), message
    # The deleted record's history stays where it was, and the new record starts its own.
    assert [h["operation"] for h in history(database_url, old_id)] == ["update", "delete"]
    assert history(database_url, restored["id"]) == []
    (logged,) = events_among(backoffice.output, "restore")
    assert (logged["outcome"], logged["record"], logged["role"]) == ("created", str(restored["id"]), OPERATOR)


def test_a_version_whose_name_was_taken_meanwhile_is_not_restored_and_the_list_says_why(backoffice, database_url):
    ada, old_id, form = deleted_by_another_operator(backoffice)
    with psycopg.connect(database_url) as conn:
        conn.execute("insert into payrail.provider_methods (provider, method, guidance) values ('ACME maps', 'geocode  an address', 'Another.')")

    reply = restore(ada, old_id, form)
    assert reply.location == "/records", (reply.status, reply.location, reply.body[:3000])
    page = followed(ada, reply)
    message = html.unescape(re.search(r'<p class="message error" role="alert">([^<]*)</p>', page).group(1))
    assert message.startswith("Not restored: ") and "another record already has this provider and method" in message, message
    assert stored(database_url, *ACME) is None
    (logged,) = events_among(backoffice.output, "restore")
    assert (logged["outcome"], logged["record"], logged["level"]) == ("refused", str(old_id), "warning")
