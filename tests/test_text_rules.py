"""Text is what it looks like: the database's character classes, case folding and name keys,
compared character by character with independent sources, and attacked with look-alike text.

The sources: Unicode's White_Space and Default_Ignorable_Code_Point from the regex module, case
folding from Python's str.casefold(), NFKC from unicodedata; search.check_query's copy of the
white space and of the empty-query rule, and the text a record is embedded from, against the
database's own.
"""

from __future__ import annotations

import unicodedata

import psycopg
import pytest
import regex

from payrail_embedder.embedders import record_text
from payrail_embedder.postgres.connection import connect
from payrail_embedder.registry.search import QUERY_BLANK, QUERY_INVISIBLE, QUERY_WHITE_SPACE, InvalidQuery, check_query
from payrail_test_support.openai_fake import FAKE_DIMENSIONS, FAKE_MODEL
from payrail_test_support.ranking import WHITE_SPACE, normalized, simple_case_fold

EVERY_CHARACTER = "select c from pg_catalog.generate_series(1, 1114111) as c where c not between 55296 and 57343"


def characters_where(conn: psycopg.Connection, condition: str, among: set[int] | None = None) -> set[int]:
    """The code points c (every one, or those among) for which the SQL condition holds."""
    if among is None:
        return {c for (c,) in conn.execute(f"select c from ({EVERY_CHARACTER}) as s where {condition}")}
    rows = conn.execute(f"select c from pg_catalog.unnest(%s::int[]) as c where {condition}", (sorted(among),))
    return {c for (c,) in rows}


def having(unicode_property: str) -> set[int]:
    """The code points with this Unicode property, as the regex module knows it."""
    return set(map(ord, regex.sub(rf"\P{{{unicode_property}}}", "", "".join(map(chr, range(0x110000))))))


@pytest.mark.slow
def test_invisible_characters_are_unicodes_default_ignorable_code_points(database_url):
    expected = having("Default_Ignorable_Code_Point")
    with connect(database_url) as conn:
        in_sql = characters_where(conn, "pg_catalog.chr(c) ~ ('[' || payrail._invisible_characters() || ']')")
    assert in_sql == expected
    assert set(map(ord, QUERY_INVISIBLE)) == expected


@pytest.mark.slow
def test_white_space_is_one_definition_in_sql_and_python_unicodes_white_space_but_nel(database_url):
    """payrail._white_space_characters, and search's copy for the query check made before any
    connection, are Unicode's White_Space but U+0085, plus the byte order mark, on every character.
    The line and paragraph separators and the no-break spaces are white space; U+0085 and the
    separators U+001C..U+001F that str.isspace() counts are control characters (refused in every
    field); zero-width characters, the word joiner and U+180E are invisible, not white space."""
    with connect(database_url) as conn:
        (defined,) = conn.execute("select payrail._white_space_characters()").fetchone()
        in_sql = characters_where(conn, "pg_catalog.chr(c) ~ ('[' || payrail._white_space_characters() || ']')")
    assert defined == QUERY_WHITE_SPACE
    assert in_sql == set(map(ord, WHITE_SPACE)) == set(map(ord, QUERY_WHITE_SPACE))
    assert set("\xa0\u2007\u202f\u2028\u2029\u3000\ufeff") <= set(QUERY_WHITE_SPACE)
    assert set("\x85\x1c\x1f\u200b\u200c\u200d\u2060\u180e") & set(QUERY_WHITE_SPACE) == set()


def test_every_rule_counts_white_space_by_the_one_definition(database_url):
    """Trimmed (stored names, guidance's emptiness), collapsed (name keys), refused (URLs, names
    of white space alone) and ignored (queries): the same characters, whatever the server's locale
    counts as \\s. Tried on every character Unicode or Python calls white space, every control and
    invisible character, and a few letters."""
    invisible = having("Default_Ignorable_Code_Point")
    controls = {c for c in range(1, 0x110000) if unicodedata.category(chr(c)) == "Cc"}
    white = set(map(ord, WHITE_SPACE))
    candidates = white | controls | invisible | {c for c in range(0x110000) if chr(c).isspace()} | set(map(ord, "aé/#"))
    rules = {
        "trimmed away": "payrail._trim_white_space(pg_catalog.chr(c)) = ''",
        # A stored name keeps a tab or line break at its ends, for the name's rule to refuse.
        "trimmed from a stored name": "payrail._canonical_name(pg_catalog.chr(c)) = ''",
        # Invisible characters leave a name's key first.
        "one space in a name's key": "payrail._normalize_name('a' || pg_catalog.chr(c) || 'b') = 'a b'",
        "refused as a name": "not payrail._is_valid_name(pg_catalog.chr(c))",
        "refused in a URL": "not payrail._is_https_url('https://a.example/' || pg_catalog.chr(c))",
        "an empty query": "payrail._is_blank(pg_catalog.chr(c))",
    }
    with connect(database_url) as conn:
        found = {rule: characters_where(conn, condition, candidates) for rule, condition in rules.items()}
    assert found == {
        "trimmed away": white,
        "trimmed from a stored name": white - controls,
        "one space in a name's key": white - invisible,
        "refused as a name": white | controls | invisible,
        "refused in a URL": white | controls | invisible,
        "an empty query": white | invisible,
    }


@pytest.mark.slow
def test_the_empty_query_rule_and_its_python_mirror_agree_on_every_character(database_url):
    with connect(database_url) as conn:
        blank_in_sql = characters_where(conn, "payrail._is_blank(pg_catalog.chr(c))")
        # The rule itself, end to end, on a few of them and on a few that are not blank.
        for ch in ("\u200b", "\u202e\u2066", "\U000e0041", "\ufe0f \u00ad", "\u3000"):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="query is empty"), conn.transaction():
                conn.execute("select payrail.query_takes_name_path(%s)", (ch,))
        assert conn.execute("select payrail.query_takes_name_path(%s)", ("\u200ba",)).fetchone() == (False,)
    assert blank_in_sql == set(map(ord, QUERY_BLANK))
    for code in range(1, 0x110000):
        if 0xD800 <= code <= 0xDFFF:
            continue
        try:
            check_query(chr(code))
            blank_in_python = False
        except InvalidQuery as refusal:
            blank_in_python = str(refusal) == "query is empty"
        assert blank_in_python == (code in blank_in_sql), f"U+{code:04X}"


@pytest.mark.slow
def test_case_folding_is_unicodes_simple_folding_of_every_character(database_url):
    with connect(database_url) as conn:
        folded_in_sql = dict(
            conn.execute(
                f"select c, pg_catalog.ascii(payrail._fold_case(pg_catalog.chr(c))) from ({EVERY_CHARACTER}) as s"
                " where payrail._fold_case(pg_catalog.chr(c)) <> pg_catalog.chr(c)"
            ).fetchall()
        )
    expected = {c: ord(simple_case_fold(chr(c))) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF}
    expected = {c: f for c, f in expected.items() if f != c}
    if folded_in_sql != expected:
        pairs = sorted(expected.items())
        pytest.fail(
            "payrail._fold_case differs from Unicode's simple case folding; its two strings are now:\n"
            + "".join(chr(c) for c, _ in pairs)
            + "\n"
            + "".join(chr(f) for _, f in pairs)
        )


INSERT = "insert into payrail.provider_methods (provider, method, urls, docs_url, guidance) values (%s, %s, %s, %s, %s)"
VALID = {"provider": "Acme", "method": "Geocode", "urls": ["https://a.example/x"], "docs_url": None, "guidance": "G."}


def refusal(conn: psycopg.Connection, **fields) -> str | None:
    """The constraint that refused the record, or None if it was saved (then rolled back)."""
    record = {**VALID, **fields}
    try:
        with conn.transaction(force_rollback=True):
            conn.execute("set local role payrail_operator")
            conn.execute(INSERT, tuple(record[k] for k in ("provider", "method", "urls", "docs_url", "guidance")))
    except psycopg.errors.CheckViolation as error:
        return error.diag.constraint_name
    return None


# One of each kind: zero-width space, joiner, bidi override and isolate, a tag, a variation
# selector, a soft hyphen, a Hangul filler, the word joiner.
INVISIBLE_SAMPLES = ["\u200b", "\u200d", "\u202e", "\u2067", "\U000e0041", "\ufe0f", "\u00ad", "\u3164", "\u2060"]


@pytest.mark.parametrize("invisible", INVISIBLE_SAMPLES, ids=lambda ch: f"U+{ord(ch):04X}")
def test_invisible_characters_are_refused_in_names_and_urls(database_url, invisible):
    with connect(database_url) as conn:
        assert refusal(conn, provider=f"Ac{invisible}me") == "provider_methods_provider_check"
        assert refusal(conn, method=f"Geo{invisible}code") == "provider_methods_method_check"
        assert refusal(conn, urls=[f"https://a{invisible}.example/"]) == "provider_methods_urls_https_check"
        assert refusal(conn, docs_url=f"https://docs.example/{invisible}x") == "provider_methods_docs_url_check"
        in_guidance = refusal(conn, guidance=f"Purpose: geocode.{invisible} Notes: paid.")
        assert in_guidance == ("provider_methods_guidance_characters_check" if 0xE0000 <= ord(invisible) <= 0xE007F else None)


def test_a_name_whose_comparison_key_would_not_fit_an_index_is_refused_by_its_rule(database_url):
    # U+FDFA is one character and 18 letters in NFKC: 120 of them make a 3,960-byte key, past
    # what a btree index entry can hold; refused by the name's rule, not by the index (54000).
    with connect(database_url) as conn:
        assert refusal(conn, provider="\ufdfa" * 120) == "provider_methods_provider_check"
        assert refusal(conn, method="\ufdfa" * 37) == "provider_methods_method_check"  # 1,221 bytes
        # The longest keys allowed fit every index, the pair's included (2,379 bytes).
        assert refusal(conn, provider="\ufdfa" * 36, method="\ufdfa" * 36) is None
        assert refusal(conn, provider="日" * 120, method="\U0002000b" * 120) is None


LOOK_ALIKES = [
    ("Stripe", "Ｓｔｒｉｐｅ"),  # fullwidth
    ("Stripe", "𝐒𝐭𝐫𝐢𝐩𝐞"),  # mathematical bold
    ("Café", "CAFE\u0301"),  # decomposed accent, another case
    ("Straße", "STRAẞE"),  # capital sharp s
    ("Kelvin", "\u212aelvin"),  # the Kelvin sign
    ("Σίσυφος", "ΣΊΣΥΦΟΣ"),  # final sigma
    ("ﬁnance", "FINANCE"),  # a ligature
]


@pytest.mark.parametrize(("name", "look_alike"), LOOK_ALIKES)
def test_one_provider_cannot_exist_twice_in_two_encodings(database_url, name, look_alike):
    with connect(database_url) as conn, conn.transaction(force_rollback=True):
        conn.execute(INSERT, (name, "Pay", [], None, "G."))
        with pytest.raises(psycopg.errors.UniqueViolation) as raised, conn.transaction():
            conn.execute(INSERT, (look_alike, "pay", [], None, "G."))
        assert raised.value.diag.constraint_name == "provider_methods_provider_method_key"


def test_the_name_path_finds_a_name_however_it_is_written(database_url):
    with connect(database_url) as conn, conn.transaction(force_rollback=True):
        conn.execute("select payrail.set_embedding_model(%s, %s)", (FAKE_MODEL, FAKE_DIMENSIONS))
        conn.execute(
            "insert into payrail.provider_methods (provider, method, guidance, enabled, embedding, embedding_model,"
            " embedding_content_hash) values ('Stripe', 'Create a refund', 'G.', true, %s, %s,"
            " payrail._content_hash('Stripe', 'Create a refund', 'G.'))",
            ([1.0] * FAKE_DIMENSIONS, FAKE_MODEL),
        )
        conn.execute("set local role payrail_agent")
        for query in ("Ｓｔｒｉｐｅ", "S\u200btripe", "\u202estripe\u202c", "ＳＴＲＩＰＥ / create\u3000a  refund"):
            rows = conn.execute("select provider, method from payrail.search_provider_methods(%s)", (query,)).fetchall()
            assert rows == [("Stripe", "Create a refund")], query


def test_the_python_key_mirror_is_the_databases(database_url):
    """The test oracle's normalized() (payrail_test_support.ranking) on the look-alikes and on every
    cased character."""
    samples = [n for pair in LOOK_ALIKES for n in pair] + ["  a\u3000\u00a0b\t", "\u212b", "ǅ", "ᾈ", "İ", "ß"]
    samples.append("".join(chr(c) for c in range(0x10000) if unicodedata.category(chr(c)) in ("Lu", "Lt", "Ll")))
    with connect(database_url) as conn:
        in_sql = [k for (k,) in conn.execute("select payrail._normalize_name(n) from unnest(%s::text[]) with ordinality as u(n, i) order by i", (samples,))]
    assert in_sql == [normalized(s) for s in samples]


@pytest.mark.parametrize(
    "provider, method, guidance",
    [("Acme", "Geocode", "Purpose: x."), ("楽天 Pay", "Pay / Refund", "Line one.\nLine two.\n\n# not a comment"), ("A: B", "C\u2028D", "\ttabbed\r\n")],
)
def test_the_text_a_record_is_embedded_from_is_the_same_in_sql_and_python(database_url, provider, method, guidance):
    """payrail._embedding_text (the write path's answer names the text to embed) and
    embedders.record_text (what the model switch and tuning embed) say the same, character for character."""
    with connect(database_url) as conn:
        (in_sql,) = conn.execute("select payrail._embedding_text(%s, %s, %s)", (provider, method, guidance)).fetchone()
    assert in_sql == record_text(provider, method, guidance)
