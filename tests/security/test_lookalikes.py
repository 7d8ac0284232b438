"""No record can pose as another, whoever writes: look-alike names and docs hosts (UTS #39's
skeleton), mixed scripts without the operator's word, and internationalized hosts, attacked
through import, edit, the backoffice's form and psql as an operator login, each refused in the
words payrail.rules has, naming the record imitated, and changing nothing.

The SQL rule itself is attacked by db/tests/104-lookalikes.sql; the skeleton is checked against
ICU by tests/security/test_unicode_security.py.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from payrail_embedder.postgres.connection import connect
from payrail_test_support.backoffice import ACME, ENABLED, OPERATOR, PASSWORD, HttpClient, http_sign_in, record_form, stored
from payrail_test_support.cli import cli_json, run_cli, run_edit, write_jsonl
from payrail_test_support.servers import login_url

# The registry's CATALOG (payrail_test_support.backoffice) holds ENABLED: "Acme Maps / Geocode an
# address", docs at docs.acme.example.
ACME_ID_SQL = "select id from payrail.provider_methods where provider = 'Acme Maps' and method = 'Geocode an address'"
# "Acme Maps" with a Cyrillic А (U+0410) and а (U+0430): the eye reads Acme Maps.
CYRILLIC_ACME = "\u0410cme M\u0430ps"


def acme_id(database_url: str) -> int:
    with connect(database_url) as conn:
        return conn.execute(ACME_ID_SQL).fetchone()[0]


def mixed_scripts_of(database_url: str, provider: str, method: str) -> bool | None:
    with connect(database_url) as conn:
        row = conn.execute("select mixed_scripts from payrail.provider_methods where provider = %s and method = %s", (provider, method)).fetchone()
    return None if row is None else row[0]


def count(database_url: str) -> int:
    with connect(database_url) as conn:
        return conn.execute("select count(*) from payrail.provider_methods").fetchone()[0]


def line(**changes) -> dict:
    return {**ENABLED, "method": "Batch geocode", "enabled": False, **changes}


@pytest.mark.parametrize(
    "changes, words",
    [
        pytest.param(
            {"provider": CYRILLIC_ACME, "mixedScripts": True},
            'provider: looks like the provider of record {id}, "Acme Maps / Geocode an address", without being the same',
            id="cyrillic-provider",
        ),
        pytest.param({"provider": "\uff21\uff43\uff4d\uff45 \uff2d\uff41\uff50\uff53 "}, None, id="fullwidth-is-the-same-provider"),
        pytest.param({"provider": "Acme Maps", "method": "Ge0code an address"}, "method: looks like the method of record {id}", id="digit-zero-method"),
        pytest.param({"provider": "Acme Maps", "method": "Geocode an addres\u0455"}, "provider_methods_scripts_check", id="mixed-scripts-method"),
        pytest.param(
            {"docsUrl": "https://docs.\u0430cme.example/batch"},
            'docsUrl: looks like the docs host of record {id}, "Acme Maps / Geocode an address" (docs.acme.example, and this one is docs.xn--cme-5cd.example)',
            id="unicode-docs-host",
        ),
        pytest.param({"docsUrl": "https://docs.xn--cme-5cd.example/batch"}, "docsUrl: looks like the docs host of record {id}", id="punycode-docs-host"),
    ],
)
def test_import_refuses_a_look_alike_in_words_naming_the_record_and_saves_nothing(registry, database_url, tmp_path, changes, words):
    before = count(database_url)
    code, report, _ = cli_json(registry, "import", "--json", write_jsonl(tmp_path / "attack.jsonl", [line(**changes)]))
    if words is None:
        # NFKC makes the fullwidth name the provider it reads as: no look-alike, one more method.
        assert (code, report["created"]) == (0, 1), report
        return
    assert code == 2 and report["saved"] is False, report
    (refused,) = report["refused"]
    assert words.format(id=acme_id(database_url)) in refused["reason"], refused
    assert "violates" not in refused["reason"], refused
    assert count(database_url) == before


def test_an_import_refuses_one_of_two_lines_that_look_alike_without_naming_a_record_it_never_saved(registry, tmp_path):
    lines = [line(provider="Globex Pay"), line(provider="GIobex Pay", method="Refund")]
    code, report, _ = cli_json(registry, "import", "--json", write_jsonl(tmp_path / "two.jsonl", lines))
    assert code == 2 and report["created"] == 0, report
    (refused,) = report["refused"]
    other = lines[2 - refused["line"]]
    assert refused["reason"].split(", without")[0] == (
        f'provider: looks like the provider of another record of this same change (another line of the same file), "{other["provider"]} / {other["method"]}"'
    ), refused


def test_import_stores_an_internationalized_host_in_its_ascii_form_and_export_shows_it(registry, database_url, tmp_path):
    record = line(provider="Bücher", method="Search", urls=["https://bücher.example/api?q=ä"], docsUrl="https://Bücher.example/docs")
    code, report, _ = cli_json(registry, "import", "--json", write_jsonl(tmp_path / "idn.jsonl", [record]))
    assert (code, report["created"]) == (0, 1), report
    row = stored(database_url, "Bücher", "Search")
    assert (row["urls"], row["docs_url"]) == (["https://xn--bcher-kva.example/api?q=ä"], "https://xn--bcher-kva.example/docs")
    exported = run_cli(registry, "export").stdout
    assert '"docsUrl": "https://xn--bcher-kva.example/docs"' in exported and "bücher.example" not in exported, exported


def test_import_takes_a_mixed_script_name_with_the_operators_word_and_export_keeps_it(registry, database_url, tmp_path):
    mixed = line(provider="\u0405quare", method="Terminal")
    code, report, _ = cli_json(registry, "import", "--json", write_jsonl(tmp_path / "mixed.jsonl", [mixed]))
    assert code == 2 and "(provider_methods_scripts_check)" in report["refused"][0]["reason"], report
    assert "is Cyrillic, Latin" in report["refused"][0]["reason"], report
    code, report, _ = cli_json(registry, "import", "--json", write_jsonl(tmp_path / "mixed.jsonl", [{**mixed, "mixedScripts": True}]))
    assert (code, report["created"]) == (0, 1), report
    assert mixed_scripts_of(database_url, "\u0405quare", "Terminal") is True
    lines = run_cli(registry, "export").stdout.splitlines()
    assert sum('"mixedScripts": true' in text for text in lines) == 1 and len(lines) == count(database_url), lines


def test_edit_reopens_with_the_look_alike_refused_in_words_and_saves_nothing(registry, database_url, tmp_path):
    text = f"Provider: {CYRILLIC_ACME}\nMethod: Batch geocode\nEnabled: no\nMixed scripts: yes\n\nPurpose: many at once.\n"
    result, shown = run_edit(registry, tmp_path, [{"write": text}, {"quit": True}], "--new")
    assert result.returncode == 2, result.stderr
    assert shown[1].splitlines()[1].startswith(f'#   Provider: looks like the provider of record {acme_id(database_url)}, "Acme Maps / Geocode an address"'), (
        shown[1]
    )
    assert stored(database_url, CYRILLIC_ACME, "Batch geocode") is None


def test_edit_saves_a_mixed_script_name_only_with_the_operators_word(registry, database_url, tmp_path):
    text = "Provider: \u0405quare\nMethod: Terminal\nEnabled: no\n\nPurpose: card terminals.\n"
    said = text.replace("Enabled: no\n", "Enabled: no\nMixed scripts: yes\n")
    result, shown = run_edit(registry, tmp_path, [{"write": text}, {"write": said}], "--new")
    assert result.returncode == 0, result.stderr
    assert "(provider_methods_scripts_check)" in shown[1], shown[1]
    assert mixed_scripts_of(database_url, "\u0405quare", "Terminal") is True


def test_the_backoffice_form_refuses_a_look_alike_next_to_its_field_and_keeps_what_was_typed(backoffice, database_url):
    client = HttpClient(backoffice.url)
    session = http_sign_in(client)
    before = count(database_url)
    form = record_form({**ENABLED, "method": "Batch geocode"}, 0, session.token, provider=CYRILLIC_ACME, docsUrl="https://docs.xn--cme-5cd.example/batch")
    form["mixedScripts"] = "on"
    reply = client.post("/records/new", form, headers={"Origin": client.origin}, cookies=session.cookies)
    assert reply.status == 422 or reply.status == 200, reply.status
    record_id = acme_id(database_url)
    # The record it imitates is named, and a link to it.
    assert f'Looks like the provider of <a href="/records/{record_id}">record {record_id}</a>, &#34;Acme Maps / Geocode an address&#34;' in reply.body, (
        reply.body
    )
    assert 'Looks like the docs host of <a href="/records/' in reply.body and "docs.xn--cme-5cd.example" in reply.body, reply.body
    assert f'value="{CYRILLIC_ACME}"' in reply.body
    assert count(database_url) == before
    # An edit of a record into a look-alike of another's name is refused the same way (a
    # record's new name may look like its own old one: that imitates nobody).
    row = stored(database_url, *ACME)
    form = record_form(ENABLED, row["version"], session.token, provider="GIobex Weather")
    reply = client.post(f"/records/{row['id']}", form, headers={"Origin": client.origin}, cookies=session.cookies)
    assert 'Looks like the provider of <a href="/records/' in reply.body and "Globex Weather / Current conditions" in reply.body, reply.body
    assert 'value="GIobex Weather"' in reply.body and stored(database_url, *ACME)["version"] == row["version"]


def test_the_backoffice_form_stores_an_internationalized_docs_host_as_ascii(backoffice, database_url):
    client = HttpClient(backoffice.url)
    session = http_sign_in(client)
    form = record_form({**ENABLED, "provider": "Bücher", "method": "Search"}, 0, session.token, docsUrl="https://bücher.example/docs")
    reply = client.post("/records/new", form, headers={"Origin": client.origin}, cookies=session.cookies)
    assert reply.status == 303, reply.body
    assert stored(database_url, "Bücher", "Search")["docs_url"] == "https://xn--bcher-kva.example/docs"


def test_psql_as_an_operator_login_meets_the_same_rules_and_words(registry, database_url):
    with psycopg.connect(login_url(database_url, OPERATOR), password=PASSWORD) as conn:
        with pytest.raises(psycopg.errors.CheckViolation) as refused:
            conn.execute(
                "insert into payrail.provider_methods (provider, method, guidance, mixed_scripts) values (%s, 'Batch', 'G.', true)",
                (CYRILLIC_ACME,),
            )
        conn.rollback()
    diag = refused.value.diag
    assert diag.constraint_name == "provider_methods_provider_lookalike_check"
    assert diag.message_primary == (
        f'provider "{CYRILLIC_ACME}" looks like the provider of record {acme_id(database_url)}, "Acme Maps / Geocode an address", '
        "without being the same: they differ only in characters that look alike"
    )
    assert diag.message_hint.startswith("Write that provider's name exactly as it is")


def test_two_writers_of_look_alike_names_at_once_never_both_commit(registry, database_url):
    """The rule reads other rows, so it locks the look: the second writer waits for the first and
    then sees its row; without the lock both would commit."""
    first = psycopg.connect(database_url)
    first.execute("insert into payrail.provider_methods (provider, method, guidance) values ('Globex Pay', 'Charge', 'G.')")
    outcome = {}

    def second_writer():
        with psycopg.connect(database_url) as conn:
            try:
                conn.execute("insert into payrail.provider_methods (provider, method, guidance) values ('GIobex Pay', 'Refund', 'G.')")
                outcome["second"] = "committed"
            except psycopg.errors.CheckViolation as error:
                outcome["second"] = error.diag.constraint_name

    thread = threading.Thread(target=second_writer)
    thread.start()
    thread.join(1)
    assert thread.is_alive(), "the second writer did not wait for the first"
    first.commit()
    first.close()
    thread.join(30)
    assert outcome == {"second": "provider_methods_provider_lookalike_check"}
