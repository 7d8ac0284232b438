"""The records list's filters read each record's narrow list entry (db/schema/036), kept by trigger:
the text filter matches exactly what a scan of every record's text did (a record whose provider,
method, guidance, URLs or docs URL contain the filter, ignoring case), the state filter and the
counts exactly what the records' own state says. The filter is anyone's to type (a form, a URL):
it stays data, never SQL or a pattern. `db apply` repairs entries that differ.
"""

from __future__ import annotations

import psycopg
import pytest

from payrail_embedder.postgres.connection import connect
from payrail_embedder.postgres.deploy import apply_schema
from payrail_embedder.registry import stored
from payrail_test_support.stored import scanned

RECORDS = [
    (
        "Acme Maps",
        "Geocode an address",
        ["https://api.acme.example/v1/geocode?q=a%20b&x_y=1"],
        "https://docs.acme.example/geo",
        "Purpose: coordinates (latitude, longitude) for a street address.\nInstructions: GET with q.",
    ),
    ("Globex Weather", "Current conditions", [], None, "Purpose: the weather now, in °C and °F.\tNotes: 100% free."),
    (
        "Initech",
        "Translate a document",
        ["https://api.initech.example/translate", "https://initech.example/pricing"],
        None,
        "Purpose: translate into Deutsch, Français, Ελληνικά.\nNotes: quotes ' and \" and a back\\slash; a: b & c | !d (e) <-> f:* g.",
    ),
    ("Hooli", "Compress a file", [], "https://docs.hooli.example/compress", "Purpose: shrink a file. ÜBER straße."),
    ("Pied Piper", "Middle-out", [], None, "Purpose: " + "x" * 1000),
    ("ΣΟΦΊΑ Λέξεις", "Ορισμός", [], None, "Purpose: ΟΔΟΣ, a word that ends in a capital sigma."),
]
# What operators type: a word, part of a word, a provider, a method across the two, part of a URL
# or of the docs URL, the separator between two URLs, one or two characters, case and accents, and
# what would be syntax in LIKE, a regular expression or SQL.
FILTERS = [
    "latitude",
    "LATITUDE",
    "itud",
    "acme",
    "ACME MAPS geocode",
    "maps geocode",
    "acme.example/v1",
    "docs.hooli",
    "/geo",
    "x_y=1",
    "a%20b",
    "translate https://initech.example/pricing",
    "e",
    "o",
    "zq",
    "w",
    "ow",
    "ZQ",
    "°c",
    "ελλην",
    "ΕΛΛΗΝ",
    "οδος",
    "οδοσ",
    "σοφία",
    "français",
    "FRANÇAIS",
    "über",
    "straße",
    "100%",
    "%",
    "_",
    "\\",
    "back\\slash",
    "'",
    '"',
    "' and \"",
    "a: b & c | !d (e) <-> f:* g",
    ".*",
    "[a-z]",
    "^",
    "$",
    "&",
    "|",
    "(",
    "'); drop table payrail.provider_methods; --",
    "purpose: xxx",
    "x" * 5,
    "xp",
    "\t",
    "\n",
    "\nnotes",
    "ress",
    "s",
    "nothing like it",
    "compress a file. über",
    "ü" * 3000,
]


@pytest.fixture
def conn(database_url):
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.cursor().executemany(
            "insert into payrail.provider_methods (provider, method, urls, docs_url, guidance) values (%s, %s, %s, %s, %s)",
            RECORDS,
        )
    with connect(database_url, autocommit=True) as conn:
        yield conn


def matching(conn, text: str, state: str | None = None) -> int:
    return stored.list_records(conn, text, state, limit=1).matching


def methods(page: stored.RecordsPage) -> list[str]:
    return [row["method"] for row in page.rows]


def names(page: stored.RecordsPage) -> list[tuple[str, str]]:
    return [(row["provider"], row["method"]) for row in page.rows]


def test_the_filter_matches_what_a_scan_of_every_records_text_matches(conn):
    # One registry for every filter: a database per filter would cost a second each.
    for text in FILTERS:
        assert names(stored.list_records(conn, text, limit=100)) == scanned(conn, text), text
        assert matching(conn, text) == len(scanned(conn, text)), text


def test_the_expected_records_match_words_urls_names_and_syntax_as_itself(conn):
    assert methods(stored.list_records(conn, "acme.example/v1")) == ["Geocode an address"]
    assert methods(stored.list_records(conn, "ACME MAPS geocode")) == ["Geocode an address"]  # provider and method
    assert methods(stored.list_records(conn, "ow")) == ["Current conditions"]  # "now": two characters
    assert methods(stored.list_records(conn, "'); drop table payrail.provider_methods; --")) == []
    assert methods(stored.list_records(conn, "%")) == ["Geocode an address", "Current conditions"]  # a%20b, 100%: no wildcard
    assert methods(stored.list_records(conn, "_")) == ["Geocode an address"]  # x_y: no wildcard
    assert methods(stored.list_records(conn, "\\")) == ["Translate a document"]
    assert methods(stored.list_records(conn, "Purpose: " + "x" * 1000)) == ["Middle-out"]
    assert methods(stored.list_records(conn, "Purpose: " + "x" * 1001)) == []
    assert stored.list_records(conn, "nothing\x00 like it").rows == stored.list_records(conn, "nothing like it").rows == []


def test_state_and_text_filter_together_and_page_through_many_matches(conn, database_url):
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(
            """insert into payrail.provider_methods (provider, method, guidance)
               select 'Mass ' || n, 'Lookup', 'Purpose: bulk record ' || n from pg_catalog.generate_series(1, 250) as n"""
        )
    for state, condition in [
        ("enabled", "pm.enabled"),
        ("draft", "not pm.enabled and pm.has_current_vector"),
        ("draft needing an embedding", "not pm.enabled and not pm.has_current_vector"),
    ]:
        assert matching(conn, "purpose", state) == len(scanned(conn, "purpose", condition)), state
    assert matching(conn, "bulk record 1", "draft needing an embedding") == 111  # 1, 10-19, 100-199
    # Forwards then backwards, the pages of a filter hold exactly its matches, in the list's order.
    pages, after = [], None
    while True:
        page = stored.list_records(conn, "BULK", after=after, limit=100)
        pages.append(page)
        if page.after is None:
            break
        after = page.after
    assert [(len(page.rows), page.matching) for page in pages] == [(100, 250), (100, 250), (50, 250)]
    beyond = stored.encode_cursor({"provider_key": "zzz", "method_key": "", "id": 0})
    assert (stored.list_records(conn, "BULK", after=beyond, limit=100).rows, matching(conn, "BULK")) == ([], 250)
    assert stored.list_records(conn, "BULK", after=beyond, limit=100).matching == 250  # counted on an empty page too
    assert stored.list_records(conn, limit=100).matching is None
    assert [name for page in pages for name in names(page)] == scanned(conn, "bulk")
    back = stored.list_records(conn, "BULK", before=pages[2].before, limit=100)
    assert back.rows == pages[1].rows and back.after == pages[1].after


def entries_differ(database_url: str) -> list[tuple]:
    """The list entries that differ from payrail._list_entry of every record (both ways)."""
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            """(select x.* from payrail.provider_methods as pm cross join lateral payrail._list_entry(pm) as x
                except all select * from payrail.provider_method_list_entries)
               union all
               (select * from payrail.provider_method_list_entries
                except all select x.* from payrail.provider_methods as pm cross join lateral payrail._list_entry(pm) as x)"""
        ).fetchall()


def test_db_apply_force_repairs_entries_that_differ_and_fills_a_registry_from_before_them(conn, database_url):
    """Entries lost or changed behind the trigger's back (a superuser, a restore without triggers)
    are rewritten by `db apply --force`, those alone; an empty table (a registry upgraded from
    before it) is filled by the apply's own transaction, and the list reads it at once."""
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(
            "delete from payrail.provider_method_list_entries where provider_method_id = (select id from payrail.provider_methods where provider = 'Hooli')"
        )
        admin.execute(
            "update payrail.provider_method_list_entries set filter_text = 'stale', enabled = true "
            "where provider_method_id = (select id from payrail.provider_methods where provider = 'Initech')"
        )
    assert len(entries_differ(database_url)) == 3  # one missing, one both ways
    assert methods(stored.list_records(conn, "compress")) == []
    result = apply_schema(database_url, force=True)
    assert (result.checked_derived_rows, result.repaired_rows) == (True, 2), result
    assert entries_differ(database_url) == []
    assert methods(stored.list_records(conn, "compress")) == ["Compress a file"]

    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute("truncate payrail.provider_method_list_entries")
    assert stored.counts(conn)["records"] == 0
    result = apply_schema(database_url, force=True)
    assert (result.repaired_rows, entries_differ(database_url)) == (0, []), result
    assert stored.counts(conn)["records"] == len(RECORDS)


def test_db_apply_rechecks_every_entry_when_a_release_changes_how_they_are_derived(conn, database_url):
    """A release that changes payrail._list_entry (here a hand edit, which db apply undoes as a
    release would bring it) makes every stored entry due for a check, after the apply's transaction."""
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute(
            """create or replace function payrail._list_entry(p_record payrail.provider_methods)
               returns payrail.provider_method_list_entries language sql immutable parallel safe security invoker
               set search_path from current
               return row(p_record.id, p_record.enabled, p_record.embedding_model, '', '', '', p_record.source)::payrail.provider_method_list_entries"""
        )
        admin.execute("update payrail.provider_methods set guidance = guidance || ' Rechecked.' where provider = 'Hooli'")
    assert methods(stored.list_records(conn, "rechecked")) == []  # its entry holds no text
    result = apply_schema(database_url)
    assert (result.checked_derived_rows, result.repaired_rows) == (True, 1), result
    assert methods(stored.list_records(conn, "rechecked")) == ["Compress a file"]
    assert entries_differ(database_url) == []
