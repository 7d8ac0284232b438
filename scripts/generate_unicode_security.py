"""Writes db/schema/016-unicode_security.sql: Unicode's confusables (UTS #39) and script data, as
ICU implements them, for the name and host rules that the database computes.

    .venv/bin/python scripts/generate_unicode_security.py

ICU (through PyICU: the pyicu-wheels package, which carries its own ICU) is the source: its SpoofChecker computes
UTS #39's skeleton, and its script data gives each character's Script_Extensions. Run it when
the ICU on the machine moves to a newer Unicode; tests/security/test_unicode_security.py fails while the
committed file differs from what this prints, and checks the SQL against ICU on every character.
"""

from __future__ import annotations

import json
import sys
from itertools import pairwise
from pathlib import Path

import icu

TARGET = Path(__file__).resolve().parent.parent / "db" / "schema" / "016-unicode_security.sql"

# UTS #39, section 5.1: a character of Han, Hiragana, Katakana, Hangul or Bopomofo also counts
# for the writing systems that combine them (Hanb: Han with Bopomofo; Jpan: Japanese; Kore: Korean).
AUGMENTED = {"Hani": ("Hanb", "Jpan", "Kore"), "Hira": ("Jpan",), "Kana": ("Jpan",), "Hang": ("Kore",), "Bopo": ("Hanb",)}
# Characters of these count for every script (digits, punctuation, combining marks).
EVERY_SCRIPT = ("Zyyy", "Zinh")


def characters() -> range:
    return range(0x110000)


def is_surrogate(code_point: int) -> bool:
    return 0xD800 <= code_point <= 0xDFFF


def confusable_prototypes() -> dict[str, str]:
    """Every character that NFD leaves alone (what a skeleton maps, after NFD) and that UTS #39
    maps to something else: its prototype, in NFD (ICU's skeleton of the character alone)."""
    checker = icu.SpoofChecker()
    nfd = icu.Normalizer2.getNFDInstance()
    prototypes = {}
    for code_point in characters():
        if is_surrogate(code_point):
            continue
        character = chr(code_point)
        if nfd.normalize(character) != character:
            continue
        skeleton = checker.getSkeleton(0, character)
        if skeleton != character:
            prototypes[character] = skeleton
    return prototypes


def script_set(code_point: int) -> str:
    """The character's augmented Script_Extensions as space-separated ISO 15924 codes; '' where
    it counts for every script (Common, Inherited)."""
    codes = [icu.Script(script).getShortName() for script in icu.Script.getScriptExtensions(code_point)]
    if len(codes) == 1 and codes[0] in EVERY_SCRIPT:
        return ""
    augmented = set(codes)
    for code in codes:
        augmented.update(AUGMENTED.get(code, ()))
    return " ".join(sorted(augmented))


def script_ranges() -> list[tuple[int, str]]:
    """(first code point, script set) of each run of characters with the same script set."""
    ranges: list[tuple[int, str]] = []
    for code_point in characters():
        scripts = script_set(code_point)
        if not ranges or ranges[-1][1] != scripts:
            ranges.append((code_point, scripts))
    return ranges


def script_names(ranges: list[tuple[int, str]]) -> dict[str, str]:
    """Each script code that occurs, by its English name (what a refusal says)."""
    codes = sorted({code for _, scripts in ranges for code in scripts.split()})
    return {code: icu.Script(icu.Script.getCode(code)[0]).getName() for code in codes}


def bracket_expression(ranges: list[tuple[int, str]], wanted) -> str:
    """The inside of a regular expression bracket matching the code points of the runs for whose
    script set wanted is true."""
    merged: list[list[int]] = []
    for (start, scripts), following in pairwise([*ranges, (0x110000, "")]):
        if not wanted(scripts):
            continue
        start = max(start, 1)
        if merged and merged[-1][1] == start - 1:
            merged[-1][1] = following[0] - 1
        else:
            merged.append([start, following[0] - 1])
    # Escapes PostgreSQL's regular expressions read, so the file stays ASCII.
    escaped = [[f"\\U{code_point:08x}" for code_point in run] for run in merged]
    return "".join(first if first == last else f"{first}-{last}" for first, last in escaped)


def json_lines(mapping: dict[str, str]) -> str:
    """A JSON object of one entry a line, non-ASCII escaped: the file stays ASCII, every
    character visible in a diff."""
    entries = [f"  {json.dumps(key)}: {json.dumps(value)}" for key, value in mapping.items()]
    return "{\n" + ",\n".join(entries) + "\n}"


def sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def int_array(values: list[int], per_line: int = 16) -> str:
    lines = [",".join(map(str, values[i : i + per_line])) for i in range(0, len(values), per_line)]
    return "'{" + ",\n".join(lines) + "}'::int[]"


def generate() -> str:
    prototypes = confusable_prototypes()
    ranges = script_ranges()
    sets = sorted({scripts for _, scripts in ranges})
    set_number = {scripts: number for number, scripts in enumerate(sets, start=1)}
    names = script_names(ranges)
    source = f"ICU {icu.ICU_VERSION}, Unicode {icu.UNICODE_VERSION}"
    return f"""\
-- Generated by scripts/generate_unicode_security.py from {source}: do not edit by hand.
-- Unicode's confusables (UTS #39's skeleton) and each character's Script_Extensions, which the
-- name and host rules of 018-lookalikes.sql compute with. Regenerate when Unicode moves on:
-- .venv/bin/python scripts/generate_unicode_security.py (tests/security/test_unicode_security.py checks
-- the file against the machine's ICU, and the SQL against ICU's own skeleton on every character).

-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- The indexes and constraints that compute with these data are rebuilt at the end of
-- 018-lookalikes.sql when this file changed them: what they are before this file replaces them.
do $$ begin perform pg_catalog.set_config('payrail.text_rules_before', payrail._text_rules_fingerprint(), false); end $$;

create or replace function payrail._unicode_security_source()
returns text
language sql
immutable parallel safe
security invoker
set search_path from current
return {sql_literal(source)};

comment on function payrail._unicode_security_source() is
$$Where the confusables and script data of db/schema/016-unicode_security.sql come from: the ICU and Unicode versions.$$;

create or replace function payrail._confusable_prototypes()
returns jsonb
language sql
immutable parallel safe
security invoker
set search_path from current
-- {len(prototypes)} characters; those NFD changes are left out, since a skeleton maps the characters of NFD(text).
return {sql_literal(json_lines(prototypes))}::jsonb;

comment on function payrail._confusable_prototypes() is
$$UTS #39's confusables: each character that looks like another text, by that text (its prototype, in NFD).

Keys are characters that NFD leaves as they are; payrail._skeleton maps each character of a
text's NFD through it.$$;

create or replace function payrail._script_range_starts()
returns int[]
language sql
immutable parallel safe
security invoker
set search_path from current
return {int_array([start for start, _ in ranges])};

comment on function payrail._script_range_starts() is
$$The first code point of each run of characters with the same scripts, in order: payrail._script_set looks a character up here.$$;

create or replace function payrail._script_range_sets()
returns int[]
language sql
immutable parallel safe
security invoker
set search_path from current
return {int_array([set_number[scripts] for _, scripts in ranges])};

comment on function payrail._script_range_sets() is
$$The scripts of each run of payrail._script_range_starts(), as a position in payrail._script_sets().$$;

create or replace function payrail._script_sets()
returns text[]
language sql
immutable parallel safe
security invoker
set search_path from current
return {sql_literal("{" + ",".join(f'"{scripts}"' for scripts in sets) + "}")}::text[];

comment on function payrail._script_sets() is
$$Each distinct set of scripts a character counts for (UTS #39's augmented Script_Extensions), as ISO 15924 codes separated by spaces; empty for every script (Common, Inherited).$$;

create or replace function payrail._latin_or_common_characters()
returns text
language sql
immutable parallel safe
security invoker
set search_path from current
return {sql_literal(bracket_expression(ranges, lambda scripts: not scripts or "Latn" in scripts.split()))};

comment on function payrail._latin_or_common_characters() is
$$The characters that are Latin or count for every script (digits, punctuation, marks), as the inside of a regular expression bracket: a name of these alone mixes no scripts.$$;

create or replace function payrail._script_names()
returns jsonb
language sql
immutable parallel safe
security invoker
set search_path from current
return {sql_literal(json_lines(names))}::jsonb;

comment on function payrail._script_names() is
$$The English name of each script code of payrail._script_sets(): what a refusal calls it.$$;
"""


def main() -> int:
    TARGET.write_text(generate(), encoding="utf-8")
    print(f"wrote {TARGET}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
