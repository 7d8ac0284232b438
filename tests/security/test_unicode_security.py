"""What names and hosts look like, as the database computes it, against ICU: the generated data
(db/schema/016-unicode_security.sql) is what scripts/generate_unicode_security.py prints from the
machine's ICU, and payrail._skeleton gives ICU's own UTS #39 skeleton for every character; the
scripts of a name (payrail._mixes_scripts) agree with ICU's Script_Extensions; Punycode decodes as
Python's codec does.
"""

from __future__ import annotations

import importlib.util

import icu
import pytest

from payrail_embedder.postgres.connection import connect
from payrail_test_support import REPO

GENERATOR = REPO / "scripts" / "generate_unicode_security.py"


def generator():
    spec = importlib.util.spec_from_file_location("generate_unicode_security", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_committed_data_are_what_the_generator_prints_from_this_icu():
    module = generator()
    assert module.TARGET.read_text(encoding="utf-8") == module.generate(), (
        "db/schema/016-unicode_security.sql is stale: run .venv/bin/python scripts/generate_unicode_security.py"
    )


@pytest.mark.slow
def test_the_skeleton_is_icus_on_every_character(database_url):
    """Every character alone, and each after a Latin letter (so NFD's reordering of marks across
    the mapped text counts), where PostgreSQL's NFD is ICU's: a character whose decomposition
    came with a later Unicode than ICU's (PostgreSQL 18 has Unicode 16) is left out."""
    checker = icu.SpoofChecker()
    nfd = icu.Normalizer2.getNFDInstance()
    texts = [prefix + chr(c) for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF for prefix in ("", "a")]
    with connect(database_url) as conn:
        decomposed, in_sql = conn.execute(
            """
            select array_agg(pg_catalog.normalize(t, 'NFD') order by n), array_agg(payrail._skeleton(t) order by n)
            from unnest(%s::text[]) with ordinality as u(t, n)
            """,
            (texts,),
        ).fetchone()
    compared = [(text, got) for text, pg_nfd, got in zip(texts, decomposed, in_sql, strict=True) if pg_nfd == nfd.normalize(text)]
    assert len(compared) > 0.9 * len(texts)
    differing = [(text, got, checker.getSkeleton(0, text)) for text, got in compared if got != checker.getSkeleton(0, text)]
    assert differing == [], differing[:20]


def test_mixed_scripts_follow_icus_script_extensions(database_url):
    cases = {
        "Stripe": False,
        "Str\u0456pe": True,  # Cyrillic і
        "\u0391PI Gateway": True,  # Greek Α
        "\u697d\u5929 Pay": False,  # Han with Latin: UTS #39's Highly Restrictive
        "\u30e4\u30de\u30c8 API": False,  # Katakana with Latin
        "\uc0bc\uc131 Pay": False,  # Hangul with Latin
        "\u042f\u043d\u0434\u0435\u043a\u0441": False,  # Cyrillic alone
        "\u042f\u043d\u0434\u0435\u043a\u0441 Maps": True,  # Cyrillic with Latin
        "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 Pay": True,  # Arabic with Latin
        "Caf\u00e9 12 \u2014 \u00bd": False,  # Latin with common characters
        "\u0395\u03bb\u03bb\u03ac\u03b4\u03b1": False,  # Greek alone
    }
    with connect(database_url) as conn:
        for name, mixes in cases.items():
            assert conn.execute("select payrail._mixes_scripts(%s)", (name,)).fetchone()[0] is mixes, name
            codes = {icu.Script(s).getShortName() for c in name for s in icu.Script.getScriptExtensions(ord(c))}
            assert codes - {"Zyyy", "Zinh"}, name  # every case has letters of some script


@pytest.mark.parametrize(
    "host",
    ["b\u00fccher.example", "docs.str\u0456pe.com", "\u4f8b\u3048.\u30c6\u30b9\u30c8", "xn--ls8h.la", "\u043f\u0440\u0438\u043c\u0435\u0440.\u0440\u0444"],
)
def test_punycode_labels_decode_as_pythons_idna_codec(database_url, host):
    ascii_host = host.encode("idna").decode("ascii")
    with connect(database_url) as conn:
        decoded = conn.execute("select payrail._unicode_host(%s)", (ascii_host,)).fetchone()[0]
    assert decoded == ascii_host.encode("ascii").decode("idna")


def test_an_invalid_punycode_label_is_kept_as_written(database_url):
    with connect(database_url) as conn:
        assert conn.execute("select payrail._unicode_host('xn--a-!.example')").fetchone()[0] == "xn--a-!.example"
        assert conn.execute("select payrail._punycode_decoded('99999999999')").fetchone()[0] is None
