"""Golden queries ranked in one pass (golden_rankings): the top three of every golden query, now and
as an edit would leave them, must be what eval (each golden query through the real search path)
gets, before the save and after it. Compared here, on both servers, for fixed edits that gain,
lose and displace records and move queries on and off the name path, and for random edits
(Hypothesis, slow tier).

The registry's vectors are the fake OpenAI service's bags of words at 64 dimensions: records
that share words are near, some are exact ties (the same words in another order), so the names'
order and the error bound's rescans are exercised, not only clear winners.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from payrail_embedder.embedders import OpenAIEmbedder
from payrail_embedder.postgres.connection import connect, naming_pgvector
from payrail_embedder.quality import golden_answers, golden_rankings, rank_words
from payrail_embedder.quality.evaluation import run_queries
from payrail_embedder.registry import golden
from payrail_embedder.registry.records import ProviderMethod
from payrail_embedder.registry.search import embed_queries
from payrail_embedder.registry.write import Change, Refused, Saved, save_changes
from payrail_test_support.openai_fake import FAKE_MODEL

# The parity test of search's second sanctioned copy (db/SEARCH.md): on every server, as search's own tests.
pytestmark = pytest.mark.every_server

WORDS = ["hotel", "room", "book", "flight", "sms", "send", "card", "charge", "refund", "map", "route", "weather"]


def record(provider: str, method: str, guidance: str, enabled: bool = True) -> ProviderMethod:
    return ProviderMethod(provider, method, [], None, guidance, enabled)


CATALOG = [
    record("Acme", "Book hotel", "book a hotel room"),
    record("Acme", "Book flight", "book a flight"),
    record("Globex", "Send SMS", "send an sms"),
    record("Globex", "Charge card", "charge a card"),
    record("Initech", "Refund", "refund a card charge"),
    record("Initech", "Route", "map a route"),
    record("Umbrella", "Weather", "weather on the route"),
    # The same words in another order as the next one: the same vector, a tie the names break.
    record("Hotel Room", "Book", "book"),
    record("Book Room", "Hotel", "book"),
    record("Stark", "Map", "map map route"),
    record("Stark", "Hotel map", "hotel map", enabled=False),
    record("Wayne", "Send card", "send a card", enabled=False),
]
GOLDEN = [
    ("book a hotel room", ["Acme / Book hotel"]),
    ("book a flight", ["Acme / Book flight"]),
    ("send an sms", ["Globex / Send SMS"]),
    ("refund the card", ["Initech / Refund", "Globex / Charge card"]),
    ("weather on my route", ["Umbrella / Weather"]),
    ("hotel map", ["Stark / Hotel map"]),
    ("room hotel book", ["Hotel Room / Book"]),
    # On the name path: a provider, a pair, a method; and a name no record has yet.
    ("Globex", ["Globex / Send SMS"]),
    ("Acme / Book flight", ["Acme / Book flight"]),
    ("route", ["Initech / Route"]),
    ("Skyfleet", ["Acme / Book flight"]),
    # A record far from its query: its rank is past the top three.
    ("book a hotel room or a flight", ["Globex / Send SMS"]),
    # A name whose matches leave out the record it should find: no rank.
    ("Acme", ["Globex / Send SMS"]),
]


@pytest.fixture
def embedder_factory(openai_fake):
    return lambda: OpenAIEmbedder(FAKE_MODEL, api_key="test-key", base_url=openai_fake.base_url, timeout=5, max_retries=0)


@pytest.fixture
def conn(database_url, embedder_factory):
    with connect(database_url, autocommit=True) as conn:
        outcomes = save_changes(conn, embedder_factory, [Change(r) for r in CATALOG])
        assert all(isinstance(o, Saved) for o in outcomes), outcomes
        for query, names in GOLDEN:
            golden.add_golden_query(conn, embedder_factory, query, names)
        yield conn


def eval_tops(conn, embedder_factory) -> dict[str, list[tuple[str, str]]]:
    """Each golden query's top three as eval gets it: through search, one query at a time."""
    results = run_queries(conn, embedder_factory, golden.labelled_queries(conn))
    return {r.labelled.query: [(m.provider, m.method) for m in r.returned] for r in results}


def ranked_tops(conn, embedder_factory) -> dict[str, list[tuple[str, str]]]:
    """Each golden query's top three as rank_golden_queries gets it: by search itself, and by the
    one pass over every record's vector (search_at_most=0), which must agree."""
    tops = [
        {r.golden.query: [(m.provider, m.method) for m in r.top] for r in golden_rankings.rank_golden_queries(conn, embedder_factory, search_at_most=most)[0]}
        for most in (golden_rankings.SEARCH_AT_MOST, 0)
    ]
    assert tops[0] == tops[1]
    return tops[0]


# Every enabled record in search's semantic order for one query vector, written out in full: the
# exact distance to the query scaled to unit length, then the normalized provider and method.
FULL_ORDER = """
select p.id, pg_catalog.row_number() over (
  order by p.embedding operator({pgvector}.<=>) {pgvector}.l2_normalize(%s::{pgvector}.vector),
           payrail._normalize_name(p.provider), payrail._normalize_name(p.method))
from payrail.provider_methods as p
where p.enabled
"""


def full_order_ranks(conn, embedder_factory) -> dict[str, dict[int, int | None]]:
    """Each golden query's wanted records' ranks from the full order of every enabled record: the
    name path's every match when the query is a name, else FULL_ORDER; a record in neither (a
    draft, a record the name path passes over) has none."""
    goldens = golden.golden_queries(conn)
    vectors = embed_queries(embedder_factory(), [g.query for g in goldens])
    ranks = {}
    for g, vector in zip(goldens, vectors, strict=True):
        named = conn.execute("select m.id, m.ordinality from rows from (payrail._name_path_matches(%s)) with ordinality as m", (g.query,)).fetchall()
        order = dict(named or conn.execute(naming_pgvector(conn, FULL_ORDER), (vector,)).fetchall())
        ranks[g.query] = {r.record_id: order.get(r.record_id) for r in g.relevant}
    return ranks


def ranked_ranks(conn, embedder_factory) -> dict[str, dict[int, int | None]]:
    """Each golden query's wanted records' ranks as rank_golden_queries gives them, by search and
    by the one pass, which must agree."""
    ranks = [
        {r.golden.query: dict(r.ranks) for r in golden_rankings.rank_golden_queries(conn, embedder_factory, search_at_most=most)[0]}
        for most in (golden_rankings.SEARCH_AT_MOST, 0)
    ]
    assert ranks[0] == ranks[1]
    return ranks[0]


def pairs(ranking) -> list[tuple[str, str]]:
    return [(m.provider, m.method) for m in ranking.top]


def stored_record(conn, provider: str, method: str) -> tuple[int, int, ProviderMethod]:
    row = conn.execute(
        "select id, version, urls, docs_url, guidance, enabled from payrail.provider_methods where provider = %s and method = %s",
        (provider, method),
    ).fetchone()
    return row[0], row[1], ProviderMethod(provider, method, row[2], row[3], row[4], row[5])


def said(change: golden_rankings.QueryChange) -> tuple:
    """What a preview says of one golden query (a new record's id is the tentative save's, new each time)."""
    return change.golden.query, pairs(change.before), pairs(change.after), change.gains, change.loses, change.what, change.verdict


def check_edit(conn, embedder_factory, change: Change) -> golden_rankings.Effect:
    """The effect of change against eval before and after it is saved; returns the effect."""
    before = eval_tops(conn, embedder_factory)
    ranks_before = full_order_ranks(conn, embedder_factory)
    preview = golden_rankings.measured_edit(conn, embedder_factory, change)
    effect = preview.effect
    # Ranked by one pass over every record's vector instead of search: the same effect.
    in_one_pass = golden_rankings.measured_edit(conn, embedder_factory, change, embedding=preview.embedding, search_at_most=0).effect
    assert [said(c) for c in in_one_pass.changes] == [said(c) for c in effect.changes]
    assert [c.to_json() for c in in_one_pass.moves] == [c.to_json() for c in effect.moves]
    if effect.outcome is not None:
        # Refused before the save: the save refuses it too, and nothing changes.
        assert not isinstance(save_changes(conn, embedder_factory, [change])[0], Saved)
        assert eval_tops(conn, embedder_factory) == before
        return effect
    (saved,) = save_changes(conn, embedder_factory, [change], embeddings=[preview.embedding])
    assert isinstance(saved, Saved), saved
    after = eval_tops(conn, embedder_factory)
    changed = {c.golden.query: c for c in effect.changes}
    assert set(changed) == {q for q in before if before[q] != after[q]}, (changed.keys(), before, after)
    for query, change_of_query in changed.items():
        assert (pairs(change_of_query.before), pairs(change_of_query.after)) == (before[query], after[query]), query
    assert ranked_tops(conn, embedder_factory) == after
    # Every wanted record's rank, before and after, is its place in the full order; the preview
    # names every golden query where one moves: with its top three (changes) or without (moves).
    ranks_after = full_order_ranks(conn, embedder_factory)
    assert ranked_ranks(conn, embedder_factory) == ranks_after
    moved = {q for q in ranks_before if ranks_before[q] != ranks_after[q]}
    assert {m.golden.query for m in effect.moves} == moved - set(changed), (effect.to_json(), ranks_before, ranks_after)
    for c in [*effect.changes, *effect.moves]:
        assert (dict(c.before.ranks), dict(c.after.ranks)) == (ranks_before[c.golden.query], ranks_after[c.golden.query]), c.golden.query
    # What edit and preview --draft print: each move in words, the largest moves (MOVES_SHOWN) among them.
    printed = "\n".join(effect.describe())
    for c in [*effect.changes, *effect.moves[: golden_answers.MOVES_SHOWN]]:
        for r, was, will in c.rank_changes:
            assert f"{r.provider} / {r.method}: {rank_words.move_in_words(was, will)}" in printed, printed
    return effect


def edited(conn, name: tuple[str, str], **fields) -> Change:
    """A change of the stored record (provider, method): fields replaced, at the version read."""
    record_id, version, current = stored_record(conn, *name)
    return Change(ProviderMethod(**{**current.__dict__, **fields}), record_id, version)


def test_edits_are_previewed_as_eval_finds_them_after_the_save(conn, embedder_factory):
    """One registry, edited step by step (each step checked against eval before and after)."""
    assert ranked_tops(conn, embedder_factory) == eval_tops(conn, embedder_factory)
    ranks = ranked_ranks(conn, embedder_factory)
    assert ranks == full_order_ranks(conn, embedder_factory)
    ids = {f"{p} / {m}": i for i, p, m in conn.execute("select id, provider, method from payrail.provider_methods")}
    # A draft has no rank, nor a record the name path passes over; a tie is broken by the names;
    # and a record far from the query has its place among all ten enabled records.
    assert ranks["hotel map"] == {ids["Stark / Hotel map"]: None}
    assert ranks["Globex"][ids["Globex / Send SMS"]] in (1, 2) and ranks["Acme"] == {ids["Globex / Send SMS"]: None}
    assert ranks["room hotel book"] == {ids["Hotel Room / Book"]: 2}
    assert ranks["book a hotel room or a flight"][ids["Globex / Send SMS"]] > 3

    # Enabling a draft: the query labelled with it gains it, first, and something else leaves.
    effect = check_edit(conn, embedder_factory, edited(conn, ("Stark", "Hotel map"), enabled=True))
    hotel_map = next(c for c in effect.changes if c.golden.query == "hotel map")
    assert hotel_map.gains and hotel_map.after.rank_of(hotel_map.record_id) == 1 and hotel_map.verdict == "better"

    # Disabling a record: the queries that found it lose it, for the worse.
    effect = check_edit(conn, embedder_factory, edited(conn, ("Acme", "Book hotel"), enabled=False))
    room = next(c for c in effect.changes if c.golden.query == "book a hotel room")
    assert room.loses and room.verdict == "worse"

    # New content near another query: it comes into that query's top three and pushes one out.
    effect = check_edit(conn, embedder_factory, edited(conn, ("Umbrella", "Weather"), guidance="send an sms text send sms"))
    sms = next(c for c in effect.changes if c.golden.query == "send an sms")
    assert sms.gains and sms.displaced and sms.verdict == "same", sms.to_json()

    # A rename moves queries onto the name path ("Skyfleet" becomes a provider) and off it.
    effect = check_edit(conn, embedder_factory, edited(conn, ("Acme", "Book flight"), provider="Skyfleet"))
    by_query = {c.golden.query: c for c in effect.changes}
    assert by_query["Skyfleet"].after.by_name and not by_query["Skyfleet"].before.by_name
    assert by_query["Acme / Book flight"].before.by_name and not by_query["Acme / Book flight"].after.by_name

    # A new record, previewed before it exists.
    effect = check_edit(conn, embedder_factory, Change(record("Zenith", "Book flight", "book a cheap flight flight"), None, 0))
    assert "book a flight" in {c.golden.query for c in effect.changes}

    # Refused by a rule (the name of another record): no effect, nothing saved.
    effect = check_edit(conn, embedder_factory, edited(conn, ("Skyfleet", "Book flight"), method="Send SMS", provider="Globex"))
    assert isinstance(effect.outcome, Refused) and effect.changes == []

    # URLs alone change no ranking.
    assert check_edit(conn, embedder_factory, edited(conn, ("Globex", "Send SMS"), urls=["https://sms.example/send"])).changes == []


def test_golden_queries_without_a_vector_kept_are_embedded_and_search_never_reads_their_vectors(conn, embedder_factory):
    semantic = ["book a hotel room", "book a flight", "room hotel book"]
    conn.execute(
        "delete from payrail.golden_query_embeddings where golden_query_id in (select id from payrail.golden_queries where query = any(%s))",
        (semantic,),
    )
    rankings, embedded_now = golden_rankings.rank_golden_queries(conn, embedder_factory)
    assert embedded_now == len(semantic)
    assert {r.golden.query: pairs(r) for r in rankings} == eval_tops(conn, embedder_factory)
    # A vector kept for a golden query changes no search: not even a wrong one.
    before = eval_tops(conn, embedder_factory)
    conn.execute(
        naming_pgvector(
            conn, "update payrail.golden_query_embeddings set embedding = array_fill(1, array[{pgvector}.vector_dims(embedding)])::real[]::{pgvector}.vector"
        )
    )
    assert eval_tops(conn, embedder_factory) == before


NAMES = ["Acme", "Globex", "Skyfleet", "Hotel Room", "route", "Book", "Zenith"]


@st.composite
def edits(draw):
    """Which record (its place among the records by id, or None: a new one), and what becomes of
    it: a provider and method (of names golden queries use too), new words, enabled or not (None: as it is)."""
    return (
        draw(st.none() | st.integers(0, 40)),
        draw(st.none() | st.sampled_from(NAMES)),
        draw(st.none() | st.sampled_from([*NAMES, "Book hotel", "Send SMS", "Weather"])),
        draw(st.none() | st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)),
        draw(st.none() | st.booleans()),
    )


@pytest.mark.slow
@settings(
    max_examples=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(edit=edits())
def test_random_edits_are_previewed_as_eval_finds_them_after_the_save(conn, embedder_factory, edit):
    place, provider, method, guidance, enabled = edit
    stored = conn.execute("select provider, method from payrail.provider_methods order by id").fetchall()
    if place is None:
        new = record(provider or "Zenith", method or f"Method {len(stored)}", guidance or "book a room", bool(enabled))
        change = Change(new, None, 0)
    else:
        fields = {"provider": provider, "method": method, "guidance": guidance, "enabled": enabled}
        change = edited(conn, stored[place % len(stored)], **{k: v for k, v in fields.items() if v is not None})
    check_edit(conn, embedder_factory, change)
