"""Property-based tests (hypothesis) of the rules, the search function and the import validation.

Arbitrary Unicode names, guidance, URLs and queries of any length, and arbitrary bytes and JSON
for import, never crash, never give an internal error (SQLSTATE class XX, or a Python exception
that is not a refusal), and never bypass a rule: whatever the database accepts satisfies the
contract's rules, checked here independently in Python. Each test works in one database (one per
server); every example runs in a transaction that is rolled back.
"""

from __future__ import annotations

import json
import re
import string
import unicodedata

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from payrail_embedder.embedders import OPENAI_MAX_BATCH, Embedder, record_text
from payrail_embedder.postgres.connection import connect
from payrail_embedder.registry import catalog
from payrail_embedder.registry.records import Line, ProviderMethod, Refusal, parse_record, read_lines
from payrail_embedder.registry.search import QUERY_BLANK, QUERY_INVISIBLE
from payrail_test_support.openai_fake import FAKE_DIMENSIONS, FAKE_MODEL, fake_embedding
from payrail_test_support.ranking import WHITE_SPACE, name_path, normalized

pytestmark = pytest.mark.slow  # hundreds of examples per test, each a transaction

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,  # no .hypothesis/ directory in the checkout
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- the contract's rules, in Python ---------------------------------------------------------------

GUIDANCE_CONTROLS_ALLOWED = "\n\t"
# The white space a name may hold (the rest are control characters).
NAME_SPACES = "".join(ch for ch in WHITE_SPACE if unicodedata.category(ch) != "Cc")


def trim(text: str) -> str:
    return text.strip(WHITE_SPACE)


def stored_name(name: str) -> str:
    """payrail._canonical_name: how a name is stored, without the spaces around it, in Unicode NFC."""
    return unicodedata.normalize("NFC", name.strip(NAME_SPACES))


def invisible(text: str) -> bool:
    return any(ch in QUERY_INVISIBLE for ch in text)


def controls(text: str, allowed: str = "") -> bool:
    return any(unicodedata.category(ch) == "Cc" and ch not in allowed for ch in text)


def name_broken(value: str) -> str | None:
    """What breaks a name's rule; the rules judge the name as it would be stored."""
    value = stored_name(value)
    if controls(value):
        return "a control character"
    if invisible(value):
        return "an invisible character"
    if not 1 <= len(trim(value)) <= 120:
        return f"{len(trim(value))} characters after trimming"
    if len(normalized(value).encode()) > 1200:
        return "a comparison key over 1,200 bytes"
    return None


def url_broken(url: str) -> str | None:
    if len(url) > 2048:
        return "over 2,048 characters"
    if any(ch in WHITE_SPACE for ch in url) or controls(url) or invisible(url):
        return "white space, a control or an invisible character"
    if url[:8].lower() != "https://":
        return "not https://"
    authority = re.split(r"[/?#]", url[8:], maxsplit=1)[0]
    if "@" in authority:
        return "user info (the host is what follows the @)"
    if not authority:
        return "no host"
    if not re.fullmatch(r"[A-Za-z0-9._-]+(:[0-9]*)?|\[[0-9A-Fa-f:.]+\](:[0-9]*)?", authority):
        return "a host not in ASCII (an internationalized one in its xn-- form), or percent-escaped"
    return None


def record_broken(provider: str, method: str, urls: list[str], docs_url: str | None, guidance: str) -> list[str]:
    broken = [f"provider: {name_broken(provider)}"] if name_broken(provider) else []
    broken += [f"method: {name_broken(method)}"] if name_broken(method) else []
    if len(urls) > 10:
        broken.append(f"{len(urls)} URLs")
    if len(set(urls)) != len(urls):
        broken.append("a duplicate URL")
    broken += [f"url {url!r}: {url_broken(url)}" for url in urls if url_broken(url)]
    if docs_url is not None and url_broken(docs_url):
        broken.append(f"docs_url: {url_broken(docs_url)}")
    if not 1 <= len(guidance) <= 8000:
        broken.append(f"guidance of {len(guidance)} characters")
    if controls(guidance, GUIDANCE_CONTROLS_ALLOWED):
        broken.append("guidance: a control character")
    if any(0xE0000 <= ord(ch) <= 0xE007F for ch in guidance):
        broken.append("guidance: a tag character")
    if not trim(guidance):
        broken.append("guidance: white space only")
    return broken


# --- strategies ------------------------------------------------------------------------------------

# Characters that sit on the rules' edges, mixed into arbitrary Unicode (no NUL: PostgreSQL text
# cannot hold it, and psycopg refuses it before sending; the import tests below cover NUL).
# Invisible characters and compatibility forms too: a bidi override, a tag, a variation selector,
# a soft hyphen, fullwidth and mathematical letters, ligatures, U+FDFA (18 letters in NFKC).
EDGES = WHITE_SPACE + "\x01\x1c\x1f\x7f\x85\x9f/?#@:[]%\\\"'\u200b\u180eÉéßΣςİ\u202e\U000e0041\ufe0f\u00adＡ𝐀ﬁ\u212a\ufdfa"
chars = st.one_of(st.characters(codec="utf-8", exclude_characters="\x00"), st.sampled_from(EDGES))


def text(min_size: int = 0, max_size: int = 20) -> st.SearchStrategy[str]:
    return st.text(chars, min_size=min_size, max_size=max_size)


def padded(core: st.SearchStrategy[str], spaces: str = WHITE_SPACE) -> st.SearchStrategy[str]:
    space = st.text(st.sampled_from(spaces), max_size=3)
    return st.builds(lambda a, c, b: a + c + b, space, core, space)


def long_run(lengths: tuple[int, int], fill: str) -> st.SearchStrategy[str]:
    """Strings around a length limit, quick to generate: a run of fill characters and a random tail."""
    return st.builds(lambda n, c, tail: c * n + tail, st.integers(*lengths), st.sampled_from(fill), text(max_size=3))


names = st.one_of(padded(text(max_size=12)), text(max_size=30), long_run((116, 124), "aé \u3000"))
urls = st.one_of(
    st.builds(
        lambda scheme, host, rest: scheme + host + rest,
        st.sampled_from(["https://", "HTTPS://", "https://user@", "http://", "https:/", "", "https://@"]),
        text(max_size=12),
        text(max_size=20),
    ),
    text(max_size=30),
    st.builds(lambda n, c: "https://example.com/" + c * n, st.integers(2024, 2032), st.sampled_from("aé\xa0")),
)
url_lists = st.builds(lambda xs, dup: xs + xs[:1] if dup else xs, st.lists(urls, max_size=11), st.booleans())
guidances = st.one_of(text(max_size=40), padded(text(max_size=5)), long_run((7996, 8004), "a\n\xa0"))

# Well-formed values, by construction: the database must accept every such record.
word = st.text(st.characters(whitelist_categories=["L", "N"]), min_size=1, max_size=8)
valid_names = st.lists(word, min_size=1, max_size=6).map(" ".join).filter(lambda n: len(n) <= 120)
ascii_word = st.text(st.sampled_from(string.ascii_letters + string.digits), min_size=1, max_size=8)
valid_urls = st.builds(lambda host, path: f"https://{host}.example/{path}", ascii_word, word).filter(lambda u: not url_broken(u))
valid_guidances = st.lists(word, min_size=1, max_size=30).map(lambda ws: "Purpose: " + " ".join(ws) + ".\nNotes:\tpaid.")
valid_url_lists = st.lists(valid_urls, max_size=10, unique=True)


def with_inserted(valid: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A well-formed value with a few arbitrary characters put in anywhere: one step off the rules."""
    return st.builds(lambda v, extra, at: v[: at % (len(v) + 1)] + extra + v[at % (len(v) + 1) :], valid, text(1, 3), st.integers(0, 200))


# Per field: anything at all, or a well-formed value just off the rules.
ARBITRARY = {
    "provider": st.one_of(names, with_inserted(valid_names)),
    "method": st.one_of(names, with_inserted(valid_names)),
    "urls": st.one_of(
        url_lists,
        st.builds(lambda xs, bad: xs[:9] + [bad], valid_url_lists, st.one_of(urls, with_inserted(valid_urls))),
        valid_url_lists.map(lambda xs: xs + xs[:1]),
        st.lists(valid_urls, min_size=11, max_size=12),
    ),
    "docs_url": st.one_of(st.none(), urls, with_inserted(valid_urls)),
    "guidance": st.one_of(guidances, with_inserted(valid_guidances)),
}


@st.composite
def records_off_by_a_little(draw):
    """A well-formed record with zero, one or two fields replaced by arbitrary values, so that both
    what the database accepts and what it refuses are explored near the rules' edges.
    """
    record = {
        "provider": draw(padded(valid_names, NAME_SPACES)),
        "method": draw(valid_names),
        "urls": draw(valid_url_lists),
        "docs_url": draw(st.none() | valid_urls),
        "guidance": draw(valid_guidances),
    }
    for name in draw(st.sets(st.sampled_from(sorted(ARBITRARY)), max_size=2)):
        record[name] = draw(ARBITRARY[name])
    return record


# Every record with the operator's word that its names may mix scripts (mixed_scripts): arbitrary
# letters mix them; the scripts rule and the look-alike rule have tests of their own
# (tests/security/test_lookalikes.py, tests/security/test_unicode_security.py, db/tests).
INSERT = """
insert into payrail.provider_methods (provider, method, urls, docs_url, guidance, mixed_scripts)
values (%s, %s, %s, %s, %s, true)
returning provider, method, urls, docs_url, guidance
"""


def assert_not_internal(error: psycopg.Error) -> None:
    assert error.sqlstate and not error.sqlstate.startswith("XX"), f"internal error {error.sqlstate}: {error}"


# --- the field rules -------------------------------------------------------------------------------


def test_whatever_the_database_accepts_obeys_every_field_rule(database_url):
    with connect(database_url) as conn:

        @SETTINGS
        @given(record=records_off_by_a_little())
        # What hypothesis found before db/ counted Unicode white space the way _trim_white_space does.
        @example(record={"provider": "Acme", "method": "Geocode", "urls": ["https://a.example/x\xa0y"], "docs_url": None, "guidance": "G."})
        @example(record={"provider": "Acme", "method": "Geocode", "urls": [], "docs_url": "https://a.example/\u202f", "guidance": "G."})
        @example(record={"provider": "Acme", "method": "Geocode", "urls": [], "docs_url": None, "guidance": "\xa0"})
        def check(record):
            values = tuple(record[name] for name in ("provider", "method", "urls", "docs_url", "guidance"))
            with conn.transaction(force_rollback=True):
                conn.execute("set local role payrail_operator")
                try:
                    with conn.transaction():
                        stored = conn.execute(INSERT, values).fetchone()
                except psycopg.Error as error:
                    assert_not_internal(error)
                    assert error.sqlstate == "23514", f"{error.sqlstate}: {error}"
                    assert error.diag.constraint_name.startswith("provider_methods_"), error.diag.constraint_name
                    return
                assert record_broken(*values) == [], f"the database accepted {values!r}"
                provider, method, *rest = values
                assert (stored[0], stored[1], list(stored[2]), stored[3], stored[4]) == (stored_name(provider), stored_name(method), *rest)

        check()


def test_every_well_formed_record_is_accepted(database_url):
    with connect(database_url) as conn:

        @SETTINGS
        @given(
            provider=padded(valid_names, NAME_SPACES),
            method=valid_names,
            urls=valid_url_lists,
            docs_url=st.none() | valid_urls,
            guidance=valid_guidances,
        )
        def check(provider, method, urls, docs_url, guidance):
            assert record_broken(provider, method, urls, docs_url, guidance) == []
            with conn.transaction(force_rollback=True):
                conn.execute("set local role payrail_operator")
                conn.execute(INSERT, (provider, method, urls, docs_url, guidance))

        check()


# Letters whose case maps one to one, in Python as in PostgreSQL's lower() (no ß, ς, İ).
CASED = "abcdefghijklmnopqrstuvwxyzàéîõüçñøåæœšžłđαβγδεζηθλμπσφωабвгдежзиклмнопрстуфхцчшщыэюя"


def look_alike(draw, ch: str) -> str:
    """The same letter in another case or encoding: upper case, decomposed (NFD), and for Latin
    letters fullwidth (Ｓ) or mathematical bold (𝐒)."""
    forms = [ch, ch.upper(), unicodedata.normalize("NFD", ch)]
    if "a" <= ch.lower() <= "z":
        forms.append(chr(ord(ch) + 0xFEE0))
        forms.append(chr((0x1D400 if ch.isupper() else 0x1D41A) + ord(ch.lower()) - ord("a")))
    return draw(st.sampled_from(forms))


def case_and_space_variant(draw, name: str) -> str:
    """The same name in any case or encoding, with any runs of white space around and between its
    words."""
    swapped = "".join(look_alike(draw, ch) for ch in name)
    # Not the byte order mark: trimmed at the ends, but invisible (refused) between words.
    space = st.text(st.sampled_from(NAME_SPACES.replace("\ufeff", "")), min_size=1, max_size=3)
    words = swapped.split(" ")
    return draw(space) + "".join(w + draw(space) for w in words[:-1]) + words[-1] + draw(space)


@st.composite
def name_pairs(draw):
    cased_name = st.lists(st.text(st.sampled_from(CASED), min_size=1, max_size=6), min_size=1, max_size=3).map(" ".join)
    provider, method = draw(cased_name), draw(cased_name)
    return provider, method, case_and_space_variant(draw, provider), case_and_space_variant(draw, method)


def looks_alike(conn: psycopg.Connection, name: str, other: str) -> bool:
    """Whether the look-alike rule refuses name beside other (their confusable skeletons are equal:
    tests/security/test_unicode_security.py checks the database's skeleton against ICU's)."""
    return conn.execute("select payrail._lookalike_key(%s) = payrail._lookalike_key(%s)", (name, other)).fetchone()[0]


def test_provider_and_method_are_unique_ignoring_case_encoding_and_runs_of_white_space(database_url):
    with connect(database_url) as conn:

        @SETTINGS
        @given(pair=name_pairs(), other=valid_names)
        def check(pair, other):
            provider, method, provider_variant, method_variant = pair
            assert normalized(provider_variant) == normalized(provider) and normalized(method_variant) == normalized(method)
            with conn.transaction(force_rollback=True):
                conn.execute(INSERT, (provider, method, [], None, "G."))
                with pytest.raises(psycopg.errors.UniqueViolation) as raised, conn.transaction():
                    conn.execute(INSERT, (provider_variant, method_variant, [], None, "G."))
                assert raised.value.diag.constraint_name == "provider_methods_provider_method_key"
                if normalized(other) != normalized(method) and not looks_alike(conn, other, method):
                    conn.execute(INSERT, (provider_variant, other, [], None, "G."))

        check()


# --- search ----------------------------------------------------------------------------------------

SEEDED = [
    ("Stripe", "Create a refund", True),
    ("Stripe", "Create a PaymentIntent", True),
    ("Ünïcode\u00a0Prövider", "Σ Maps", True),
    ("Acme", "Create a refund", True),
    ("Acme", "Geocode an address", False),  # a draft: search never shows it
    ("Örnek", "Ödeme al", True),
]


def seed_search(database_url: str, records: list[tuple[str, str, bool]] = SEEDED) -> None:
    """A registry of these (provider, method, enabled) records, each embedded by the fake model."""
    with connect(database_url) as conn:
        conn.execute("select payrail.set_embedding_model(%s, %s)", (FAKE_MODEL, FAKE_DIMENSIONS))
        for provider, method, enabled in records:
            guidance = f"Purpose: {method.lower()} with {provider}."
            conn.execute(
                """
                insert into payrail.provider_methods
                  (provider, method, guidance, enabled, embedding, embedding_model, embedding_content_hash, mixed_scripts)
                values (%s, %s, %s, %s, %s, %s, payrail._content_hash(%s, %s, %s), true)
                """,
                (provider, method, guidance, enabled, fake_embedding(record_text(provider, method, guidance)), FAKE_MODEL, provider, method, guidance),
            )


def name_path_answer(query: str) -> list[tuple[str, str]]:
    """The contract's name path over SEEDED."""
    records = [{"provider": p, "method": m, "enabled": enabled} for p, m, enabled in SEEDED]
    return [(r["provider"], r["method"]) for r in name_path(records, query)]


@st.composite
def seeded_name_queries(draw):
    provider, method, _ = draw(st.sampled_from(SEEDED))
    name = draw(st.sampled_from([provider, method, f"{provider} {method}", f"{provider} / {method}"]))
    return case_and_space_variant(draw, name)


queries = st.one_of(
    text(max_size=40),
    padded(text(max_size=3)),
    st.text(st.sampled_from(WHITE_SPACE), max_size=4),
    long_run((1996, 2004), "a \xa0"),
    seeded_name_queries(),
)


def query_is_invalid(query: str) -> bool:
    """22023 by the contract: empty, white space or invisible characters only, or over 2,000 characters."""
    return not query.strip(QUERY_BLANK) or len(query) > 2000


def test_search_on_any_text_answers_at_most_three_by_name_or_asks_for_an_embedding(database_url):
    seed_search(database_url)
    with connect(database_url) as conn:

        @SETTINGS
        @given(query=queries)
        @example(query="\xa0")
        @example(query="\u202f\u2007")
        def check(query):
            with conn.transaction(force_rollback=True):
                conn.execute("set local role payrail_agent")
                try:
                    with conn.transaction():
                        rows = conn.execute("select * from payrail.search_provider_methods(%s)", (query,)).fetchall()
                except psycopg.Error as error:
                    assert_not_internal(error)
                    assert error.sqlstate in ("22023", "PYE01"), f"{error.sqlstate}: {error}"
                    assert (error.sqlstate == "22023") == query_is_invalid(query), (error.sqlstate, query)
                    if error.sqlstate == "PYE01":
                        assert name_path_answer(query) == []
                        assert conn.execute("select payrail.query_takes_name_path(%s)", (query,)).fetchone()[0] is False
                    return
                assert not query_is_invalid(query), f"answered the invalid query {query!r}"
                assert 1 <= len(rows) <= 3
                assert [(r[0], r[1]) for r in rows] == name_path_answer(query)
                assert conn.execute("select payrail.query_takes_name_path(%s)", (query,)).fetchone()[0] is True

        check()


vectors = st.one_of(
    st.lists(st.floats(width=32), min_size=FAKE_DIMENSIONS, max_size=FAKE_DIMENSIONS),
    st.lists(st.floats(width=32), min_size=0, max_size=FAKE_DIMENSIONS + 2),
    st.lists(st.floats(-1, 1, width=32), min_size=FAKE_DIMENSIONS, max_size=FAKE_DIMENSIONS),
)


def test_search_with_any_vector_answers_at_most_three_or_says_why_not(database_url):
    seed_search(database_url)
    with connect(database_url) as conn:

        @SETTINGS
        @given(query=queries, vector=vectors, model=st.sampled_from([None, FAKE_MODEL, "another-model"]))
        def check(query, vector, model):
            vector = np.array(vector, dtype=np.float32)
            well_formed = len(vector) == FAKE_DIMENSIONS and np.all(np.isfinite(vector)) and np.any(vector) and model != "another-model"
            with conn.transaction(force_rollback=True):
                conn.execute("set local role payrail_agent")
                try:
                    with conn.transaction():
                        rows = conn.execute("select * from payrail.search_provider_methods(%s, %s, %s)", (query, vector, model)).fetchall()
                except psycopg.Error as error:
                    assert_not_internal(error)
                    # 22000: pgvector's own input errors (NaN, infinity, no dimension).
                    assert error.sqlstate in ("22023", "PYE02", "22000"), f"{error.sqlstate}: {error}"
                    assert query_is_invalid(query) or not well_formed, (error.sqlstate, str(error))
                    return
                assert not query_is_invalid(query)
                assert len(rows) <= 3
                by_name = name_path_answer(query)
                if by_name:
                    assert [(r[0], r[1]) for r in rows] == by_name
                else:
                    assert well_formed, (vector, model)
                    enabled = {(p, m) for p, m, e in SEEDED if e}
                    assert len(rows) == 3 and {(r[0], r[1]) for r in rows} <= enabled

        check()


# --- vectors of extreme scale ----------------------------------------------------------------------

# Directions whose components are 0 or between 2^-20 and 1 in size, so that scaling them by 2^k
# is exact in float32 for k from -106 to 127 (no component becomes subnormal or infinite).
component = st.one_of(st.just(0.0), st.floats(2.0**-20, 1.0, width=32), st.floats(-1.0, -(2.0**-20), width=32))
directions = st.lists(component, min_size=FAKE_DIMENSIONS, max_size=FAKE_DIMENSIONS).filter(any).map(lambda xs: np.array(xs, dtype=np.float32))
SEMANTIC = "a question that is no provider or method name"


def semantic_answer(conn: psycopg.Connection, vector: np.ndarray) -> list[tuple[str, str]]:
    rows = conn.execute("select * from payrail.search_provider_methods(%s, %s, %s)", (SEMANTIC, vector, FAKE_MODEL))
    return [(r[0], r[1]) for r in rows]


def test_a_query_vectors_scale_never_changes_the_ranking(database_url):
    """From 2^-106 to 2^127 (float32's whole range: squares overflow above 2^64 and vanish below
    2^-75), a query ranks by its direction alone."""
    seed_search(database_url)
    with connect(database_url) as conn:

        @SETTINGS
        @given(direction=directions, exponent=st.integers(-106, 127))
        @example(direction=np.full(FAKE_DIMENSIONS, 0.5, dtype=np.float32), exponent=127)
        @example(direction=np.full(FAKE_DIMENSIONS, 0.5, dtype=np.float32), exponent=-106)
        def check(direction, exponent):
            with conn.transaction(force_rollback=True):
                conn.execute("set local role payrail_agent")
                scaled = direction * np.float32(2.0**exponent)
                assert np.all(scaled / np.float32(2.0**exponent) == direction)  # the scaling was exact
                assert semantic_answer(conn, scaled) == semantic_answer(conn, direction)

        check()


def test_a_stored_vectors_scale_never_changes_the_ranking_or_is_refused(database_url):
    """A stored vector scaled by 2^k ranks as before while its length stays within 2^-32..2^32; beyond, it is refused (22023)."""
    seed_search(database_url)
    with connect(database_url) as conn:
        ids = [i for (i,) in conn.execute("select id from payrail.provider_methods where enabled order by id")]

        @SETTINGS
        @given(query=directions, record=st.sampled_from(ids), exponent=st.integers(-100, 100))
        @example(query=np.full(FAKE_DIMENSIONS, 0.5, dtype=np.float32), record=ids[0], exponent=33)
        @example(query=np.full(FAKE_DIMENSIONS, 0.5, dtype=np.float32), record=ids[0], exponent=-33)
        def check(query, record, exponent):
            with conn.transaction(force_rollback=True):
                before = semantic_answer(conn, query)
                (stored,) = conn.execute("select embedding::real[] from payrail.provider_methods where id = %s", (record,)).fetchone()
                scaled = np.array(stored, dtype=np.float32) * np.float32(2.0**exponent)
                # A stored vector's length is about 1, not exactly: the bound is on the scaled length,
                # as pgvector's vector_norm computes it (in double precision).
                allowed = 2.0**-32 <= np.linalg.norm(scaled.astype(np.float64)) <= 2.0**32
                try:
                    with conn.transaction():
                        conn.execute("update payrail.provider_methods set embedding = %s where id = %s", (scaled, record))
                except psycopg.errors.InvalidParameterValue as error:
                    assert not allowed, str(error)
                    assert "a stored vector's length must be between 2^-32 and 2^32" in str(error)
                    return
                assert allowed, "a vector of extreme length was stored"
                assert semantic_answer(conn, query) == before

        check()


# --- import validation -----------------------------------------------------------------------------

# Any character a JSON \u escape can spell: NUL and lone surrogates (\ud800) too, which PostgreSQL
# text cannot hold.
any_char = st.one_of(st.characters(), st.characters(categories=["Cs"]), st.just("\x00"), st.sampled_from(EDGES))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(any_char, max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
any_strings = st.one_of(text(max_size=20), st.text(any_char, max_size=10))
record_shaped = st.fixed_dictionaries(
    {"provider": any_strings, "method": any_strings, "guidance": any_strings},
    optional={
        "urls": st.lists(any_strings, max_size=3) | json_values,
        "docsUrl": st.none() | any_strings | json_values,
        "enabled": st.booleans() | json_values,
        "unknown": json_values,
    },
)


def storable(value: str) -> bool:
    """Text PostgreSQL can hold: valid UTF-8 (no lone surrogate) and no NUL."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


@SETTINGS
@given(data=json_values | record_shaped)
def test_parse_record_of_any_json_gives_a_storable_record_or_a_refusal(data):
    try:
        record = parse_record(data)
    except ValueError:
        return
    assert isinstance(record, ProviderMethod)
    assert all(storable(v) for v in (record.provider, record.method, record.guidance, *record.urls))
    assert record.docs_url is None or storable(record.docs_url)


def jsonl(lines: list) -> bytes:
    return b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines)


def test_read_lines_of_any_bytes_yields_records_or_refusals(tmp_path):
    path = tmp_path / "catalog.jsonl"

    @SETTINGS
    @given(content=st.binary(max_size=200) | st.lists(st.binary(max_size=40) | record_shaped | json_values, max_size=4).map(jsonl))
    @example(content=b"[" * 100_000)
    @example(content=b'{"provider": "A\\ud800", "method": "m", "guidance": "g"}\n')
    @example(content=b'{"provider": "A\\u0000", "method": "m", "guidance": "g"}\n')
    @example(content=b"\xff\xfe{}\n\r\n\x00")
    def check(content):
        path.write_bytes(content)
        # Lines as the file object reads them: split at \n only.
        line_count = content.count(b"\n") + (not content.endswith(b"\n"))
        for item in read_lines(path):
            assert isinstance(item, Line | Refusal), item
            assert 1 <= item.line <= line_count
            if isinstance(item, Line):
                record = item.record
                assert all(storable(v) for v in (record.provider, record.method, record.guidance, *record.urls))

    check()


class FakeEmbedder(Embedder):
    """The fake OpenAI server's vectors, in process: import needs an embedder, not HTTP here."""

    model_name = FAKE_MODEL
    batch_size = OPENAI_MAX_BATCH

    def embed(self, texts):
        return [fake_embedding(t) for t in texts]


def test_import_of_any_json_line_saves_a_valid_record_or_refuses_it(database_url, tmp_path):
    path = tmp_path / "catalog.jsonl"
    with connect(database_url, autocommit=True) as conn:

        @SETTINGS
        @given(lines=st.lists(record_shaped | json_values, min_size=1, max_size=3), skip_invalid=st.booleans())
        def check(lines, skip_invalid):
            path.write_bytes(jsonl(lines))
            # Import commits; each example starts from an empty registry.
            conn.execute("delete from payrail.provider_methods")
            report = catalog.import_records(conn, FakeEmbedder, read_lines(path), skip_invalid=skip_invalid)
            stored = conn.execute(
                "select provider, method, urls, docs_url, guidance, embedding is not null and"
                " embedding_content_hash = content_hash from payrail.provider_methods"
            ).fetchall()
            if not report.saved:
                assert stored == []
            for provider, method, urls, docs_url, guidance, embedded in stored:
                assert record_broken(provider, method, list(urls), docs_url, guidance) == []
                assert embedded

        check()
