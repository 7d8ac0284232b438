-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- No record can pose as another: what names and hosts look like, computed from Unicode's
-- confusables and scripts (016-unicode_security.sql, generated from ICU). The rules that use
-- these functions: the lookalike trigger (functions/104-lookalikes.sql), the mixed-scripts and
-- ASCII-host constraints (030-provider_methods.sql), and the indexes its lookups read.

create or replace function payrail._skeleton(p_text text)
returns text
language plpgsql
immutable strict parallel safe
security invoker
set search_path from current
-- UTS #39's skeleton: NFD, each character replaced by its prototype, NFD again. Two texts that
-- look alike have the same skeleton ("Strіpe" with a Cyrillic і, "PayPaI" with a capital I).
-- Text of ASCII only (nearly every name) replaces the few ASCII characters that have a prototype
-- (0, 1, I, m, |, ...) in place, instead of a lookup per character.
as $$
declare
  v_character text;
  v_skeleton text := '';
begin
  if p_text operator(pg_catalog.!~) '[^\u0001-\u007f]' then
    v_skeleton := p_text;
    foreach v_character in array payrail._confusable_ascii_sources() loop
      if pg_catalog.strpos(v_skeleton, v_character) operator(pg_catalog.>) 0 then
        v_skeleton := pg_catalog.replace(v_skeleton, v_character, payrail._confusable_prototypes() operator(pg_catalog.->>) v_character);
      end if;
    end loop;
    return pg_catalog.normalize(v_skeleton, 'NFD');
  end if;
  foreach v_character in array pg_catalog.regexp_split_to_array(pg_catalog.normalize(p_text, 'NFD'), '') loop
    v_skeleton := v_skeleton operator(pg_catalog.||)
                  coalesce(payrail._confusable_prototypes() operator(pg_catalog.->>) v_character, v_character);
  end loop;
  return pg_catalog.normalize(v_skeleton, 'NFD');
end
$$;

comment on function payrail._skeleton(text) is
$$UTS #39's confusable skeleton of a text (NFD, each character mapped to its prototype, NFD): texts that look alike have the same one.$$;

create or replace function payrail._confusable_ascii_sources()
returns text[]
language sql
immutable parallel safe
security invoker
set search_path from current
return (select pg_catalog.array_agg(c.key order by c.key)
        from pg_catalog.jsonb_object_keys(payrail._confusable_prototypes()) as c(key)
        where c.key operator(pg_catalog.<) E'\u0080');

comment on function payrail._confusable_ascii_sources() is
$$The ASCII characters that have a confusable prototype (0, 1, I, m, |, ...): what payrail._skeleton replaces in text of ASCII only.$$;

create or replace function payrail._lookalike_key(p_name text)
returns text
language plpgsql
immutable strict parallel safe
security invoker
set search_path from current
-- The skeleton of the name as written (so a capital I is an l, and "PayPaI" is "PayPal"), then
-- case-folded, as names compare: "Strіpe", "PAYPAl" and "PayPaI" each look like a record named
-- "stripe" or "PayPal". Compatibility forms, invisible characters and white space count as
-- payrail._normalize_name counts them. Text of ASCII only (nearly every name) has no invisible
-- character and is its own NFKC: it skips both.
as $$
begin
  if p_name operator(pg_catalog.!~) '[^\u0001-\u007f]' then
    -- The prototypes of ASCII characters have no case but ASCII letters' (tests/security/test_unicode_security.py).
    return pg_catalog.translate(
      payrail._skeleton(pg_catalog.btrim(
        pg_catalog.regexp_replace(p_name, '[' operator(pg_catalog.||) payrail._white_space_characters() operator(pg_catalog.||) ']+', ' ', 'g'),
        ' ')),
      'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
  end if;
  return payrail._fold_case(payrail._skeleton(pg_catalog.btrim(
    pg_catalog.regexp_replace(
      pg_catalog.normalize(
        pg_catalog.regexp_replace(p_name, '[' operator(pg_catalog.||) payrail._invisible_characters() operator(pg_catalog.||) ']', '', 'g'),
        'NFKC'),
      '[' operator(pg_catalog.||) payrail._white_space_characters() operator(pg_catalog.||) ']+', ' ', 'g'),
    ' ')));
end
$$;

comment on function payrail._lookalike_key(text) is
$$What a name looks like: its UTS #39 skeleton (of its NFKC form, invisible characters dropped, white space collapsed), case-folded.

Two names with the same key look alike; the lookalike rule refuses a provider, method or docs
host whose key another record's has under another name.$$;

create or replace function payrail._script_set(p_character text)
returns text[]
language plpgsql
immutable strict parallel safe
security invoker
set search_path from current
-- A binary search of the runs of 016-unicode_security.sql. The data are constants of the cached
-- plan (immutable functions without arguments), read in place, never copied per call.
as $$
declare
  v_code_point constant int := pg_catalog.ascii(p_character);
  v_low int := 1;
  v_high int := pg_catalog.cardinality(payrail._script_range_starts());
  v_middle int;
begin
  while v_low operator(pg_catalog.<) v_high loop
    v_middle := (v_low operator(pg_catalog.+) v_high operator(pg_catalog.+) 1) operator(pg_catalog./) 2;
    if (payrail._script_range_starts())[v_middle] operator(pg_catalog.<=) v_code_point then
      v_low := v_middle;
    else
      v_high := v_middle operator(pg_catalog.-) 1;
    end if;
  end loop;
  return pg_catalog.string_to_array((payrail._script_sets())[(payrail._script_range_sets())[v_low]], ' ');
end
$$;

comment on function payrail._script_set(text) is
$$The scripts a character counts for (UTS #39's augmented Script_Extensions, ISO 15924 codes); empty for every script (digits, punctuation, combining marks).$$;

create or replace function payrail._mixes_scripts(p_name text)
returns boolean
language plpgsql
immutable strict parallel safe
security invoker
set search_path from current
-- UTS #39's Highly Restrictive level, refused below it: a name is of one script (the scripts
-- every character counts for have one in common; digits, punctuation and marks count for all),
-- or Latin with Japanese (Han, Hiragana, Katakana), Chinese (Han, Bopomofo) or Korean (Han,
-- Hangul), which people write together. Latin with Cyrillic or Greek, the look-alike scripts,
-- mixes. A name of Latin and common characters alone (nearly every name) is judged by one
-- regular expression; others character by character.
as $$
declare
  v_character text;
  v_scripts text[];
  -- The scripts every character so far counts for (NULL: every script), of all characters, and
  -- of those that are not Latin.
  v_common text[];
  v_common_but_latin text[];
begin
  if p_name operator(pg_catalog.!~) ('[^' operator(pg_catalog.||) payrail._latin_or_common_characters() operator(pg_catalog.||) ']') then
    return false;
  end if;
  foreach v_character in array pg_catalog.regexp_split_to_array(pg_catalog.normalize(p_name, 'NFD'), '') loop
    v_scripts := payrail._script_set(v_character);
    continue when pg_catalog.cardinality(v_scripts) operator(pg_catalog.=) 0;
    v_common := case when v_common is null then v_scripts
                     else array(select s from pg_catalog.unnest(v_common) as s where s operator(pg_catalog.=) any (v_scripts)) end;
    continue when 'Latn' operator(pg_catalog.=) any (v_scripts);
    v_common_but_latin := case when v_common_but_latin is null then v_scripts
                               else array(select s from pg_catalog.unnest(v_common_but_latin) as s
                                          where s operator(pg_catalog.=) any (v_scripts)) end;
  end loop;
  return not (v_common is null
              or pg_catalog.cardinality(v_common) operator(pg_catalog.>) 0
              or v_common_but_latin operator(pg_catalog.&&) '{Jpan,Hanb,Kore}'::text[]);
end
$$;

comment on function payrail._mixes_scripts(text) is
$$True for a name that mixes scripts below UTS #39's Highly Restrictive level: Latin with Cyrillic or Greek, say, not Latin with Japanese.$$;

create or replace function payrail._scripts_in_words(p_name text)
returns text
language sql
immutable strict parallel safe
security invoker
set search_path from current
-- Each character's first script (its own, not the writing systems UTS #39 adds), by name.
return (select pg_catalog.string_agg(n.name, ', ' order by n.first_at)
        from (select payrail._script_names() operator(pg_catalog.->>) s.scripts[1] as name,
                     pg_catalog.min(s.position) as first_at
              from pg_catalog.regexp_split_to_table(p_name, '') with ordinality as c(character, position)
              cross join lateral (select payrail._script_set(c.character) as scripts, c.position) as s
              where pg_catalog.cardinality(s.scripts) operator(pg_catalog.>) 0
              group by 1) as n);

comment on function payrail._scripts_in_words(text) is
$$The scripts of a name's letters, by name, in the order they first occur ("Latin, Cyrillic"): what a refusal of mixed scripts says.$$;

create or replace function payrail._url_authority(p_url text)
returns text
language plpgsql
immutable strict parallel safe
security invoker
set search_path from current
-- What follows https:// up to the path, query or fragment (host, port, any user info). String
-- functions, not a regular expression with a group, in PL/pgSQL, whose calls cost a fifth of a
-- SQL body's: computed in an index entry and a constraint of every write.
as $$
begin
  if pg_catalog.lower(pg_catalog.left(p_url, 8)) operator(pg_catalog.<>) 'https://' then
    return null;
  end if;
  return pg_catalog.split_part(pg_catalog.split_part(pg_catalog.split_part(pg_catalog.substr(p_url, 9), '/', 1), '?', 1), '#', 1);
end
$$;

comment on function payrail._url_authority(text) is
$$The authority of an https URL (host, port, user info): what follows https:// up to the path, query or fragment; NULL for another scheme.$$;

create or replace function payrail._url_host(p_url text)
returns text
language plpgsql
immutable strict parallel safe
security invoker
set search_path from current
-- ASCII hosts only (the ASCII-host rule refuses others), so lower() of the ASCII letters is all
-- the case there is; an IPv6 address keeps its brackets.
as $$
declare
  v_authority constant text := payrail._url_authority(p_url);
begin
  if pg_catalog.left(v_authority, 1) operator(pg_catalog.=) '[' then
    return pg_catalog.translate(pg_catalog.split_part(v_authority, ']', 1) operator(pg_catalog.||) ']',
                                'ABCDEF', 'abcdef');
  end if;
  return pg_catalog.translate(pg_catalog.split_part(v_authority, ':', 1),
                              'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
end
$$;

comment on function payrail._url_host(text) is
$$The host of an https URL, lower-cased and without its port; NULL for another scheme.$$;

create or replace function payrail._has_ascii_host(p_url text)
returns boolean
language plpgsql
immutable strict parallel safe
security invoker
set search_path from current
-- Letters, digits, hyphens and dots (internationalized labels as xn--), or an IPv6 address in
-- brackets: no percent-escapes either, which browsers decode into the host before showing it.
-- A URL that is no valid https URL is the https rule's to refuse, not this one's.
as $$
declare
  v_authority constant text := payrail._url_authority(p_url);
begin
  return v_authority operator(pg_catalog.!~) '[^A-Za-z0-9._:-]'
         and v_authority operator(pg_catalog.~) '^[A-Za-z0-9._-]+(:[0-9]*)?$'
      or v_authority operator(pg_catalog.~) '^\[[0-9A-Fa-f:.]+\](:[0-9]*)?$'
      or not payrail._is_https_url(p_url);
end
$$;

comment on function payrail._has_ascii_host(text) is
$$True for an https URL whose host is written in ASCII: letters, digits, hyphens and dots (an internationalized name in its xn-- form, IDNA), or an IPv6 address.$$;

create or replace function payrail._have_ascii_hosts(p_urls text[])
returns boolean
language plpgsql
immutable strict parallel safe
security invoker
set search_path from current
as $$
declare
  v_url text;
begin
  foreach v_url in array p_urls loop
    -- A NULL element is the https rule's to refuse.
    if v_url is not null and not payrail._has_ascii_host(v_url) then
      return false;
    end if;
  end loop;
  return true;
end
$$;

comment on function payrail._have_ascii_hosts(text[]) is
$$True when every URL of the array has an ASCII host (payrail._has_ascii_host).$$;

create or replace function payrail._punycode_decoded(p_label text)
returns text
language plpgsql
immutable strict parallel safe
security invoker
set search_path from current
-- RFC 3492's decoder, for a label without its xn-- prefix; NULL when it is no valid Punycode.
as $$
declare
  -- The last hyphen: what comes before it is the label's ASCII part.
  v_delimiter int := (pg_catalog.length(p_label) operator(pg_catalog.-)
                      pg_catalog.strpos(pg_catalog.reverse(p_label), '-')) operator(pg_catalog.+) 1;
  v_output int[] := '{}';
  v_position int;
  v_code_point bigint := 128;
  v_index bigint := 0;
  v_bias bigint := 72;
  v_old_index bigint;
  v_weight bigint;
  v_k bigint;
  v_digit int;
  v_threshold bigint;
  v_delta bigint;
  v_character text;
begin
  if pg_catalog.strpos(p_label, '-') operator(pg_catalog.=) 0 then
    v_delimiter := 0;
  end if;
  if v_delimiter operator(pg_catalog.>) 0 then
    v_output := array(select pg_catalog.ascii(c) from pg_catalog.regexp_split_to_table(pg_catalog.left(p_label, v_delimiter operator(pg_catalog.-) 1), '') as c);
  end if;
  v_position := v_delimiter operator(pg_catalog.+) 1;
  while v_position operator(pg_catalog.<=) pg_catalog.length(p_label) loop
    v_old_index := v_index;
    v_weight := 1;
    v_k := 36;
    loop
      if v_position operator(pg_catalog.>) pg_catalog.length(p_label) then
        return null;
      end if;
      v_character := pg_catalog.substr(p_label, v_position, 1);
      v_position := v_position operator(pg_catalog.+) 1;
      v_digit := case when v_character operator(pg_catalog.~) '^[0-9]$' then pg_catalog.ascii(v_character) operator(pg_catalog.-) 22
                      when v_character operator(pg_catalog.~) '^[a-z]$' then pg_catalog.ascii(v_character) operator(pg_catalog.-) 97
                      when v_character operator(pg_catalog.~) '^[A-Z]$' then pg_catalog.ascii(v_character) operator(pg_catalog.-) 65 end;
      if v_digit is null then
        return null;
      end if;
      v_index := v_index operator(pg_catalog.+) (v_digit operator(pg_catalog.*) v_weight);
      if v_index operator(pg_catalog.>) 1114111000 then
        return null;
      end if;
      -- greatest and least are SQL's own syntax, not functions a schema could hold.
      v_threshold := greatest(1, least(26, v_k operator(pg_catalog.-) v_bias));
      exit when v_digit operator(pg_catalog.<) v_threshold;
      v_weight := v_weight operator(pg_catalog.*) (36 operator(pg_catalog.-) v_threshold);
      v_k := v_k operator(pg_catalog.+) 36;
    end loop;
    -- adapt(delta, number of code points, first time)
    v_delta := (v_index operator(pg_catalog.-) v_old_index) operator(pg_catalog./) (case when v_old_index operator(pg_catalog.=) 0 then 700 else 2 end);
    v_delta := v_delta operator(pg_catalog.+) (v_delta operator(pg_catalog./) (pg_catalog.cardinality(v_output) operator(pg_catalog.+) 1));
    v_k := 0;
    while v_delta operator(pg_catalog.>) 455 loop
      v_delta := v_delta operator(pg_catalog./) 35;
      v_k := v_k operator(pg_catalog.+) 36;
    end loop;
    v_bias := v_k operator(pg_catalog.+) ((36 operator(pg_catalog.*) v_delta) operator(pg_catalog./) (v_delta operator(pg_catalog.+) 38));
    v_code_point := v_code_point operator(pg_catalog.+) (v_index operator(pg_catalog./) (pg_catalog.cardinality(v_output) operator(pg_catalog.+) 1));
    v_index := v_index operator(pg_catalog.%) (pg_catalog.cardinality(v_output) operator(pg_catalog.+) 1);
    if v_code_point operator(pg_catalog.>) 1114111
       or (v_code_point operator(pg_catalog.>=) 55296 and v_code_point operator(pg_catalog.<=) 57343) then
      return null;
    end if;
    v_output := (v_output[1:v_index] operator(pg_catalog.||) v_code_point::int) operator(pg_catalog.||) v_output[(v_index operator(pg_catalog.+) 1):];
    v_index := v_index operator(pg_catalog.+) 1;
  end loop;
  return (select pg_catalog.string_agg(pg_catalog.chr(c), '' order by n) from pg_catalog.unnest(v_output) with ordinality as o(c, n));
end
$$;

comment on function payrail._punycode_decoded(text) is
$$The Unicode text of a Punycode label (RFC 3492; the label without its xn-- prefix); NULL when it is not valid Punycode.$$;

create or replace function payrail._unicode_host(p_host text)
returns text
language sql
immutable strict parallel safe
security invoker
set search_path from current
-- Each xn-- label decoded (an invalid one is kept as written), as a browser shows the host.
return (select pg_catalog.string_agg(
                 case when l.label operator(pg_catalog.~~) 'xn--%'
                      then coalesce(payrail._punycode_decoded(pg_catalog.substr(l.label, 5)), l.label)
                      else l.label end,
                 '.' order by l.position)
        from pg_catalog.regexp_split_to_table(p_host, '\.') with ordinality as l(label, position));

comment on function payrail._unicode_host(text) is
$$A host with its internationalized labels (xn--...) decoded: what a reader sees.$$;

create or replace function payrail._host_lookalike_key(p_url text)
returns text
language plpgsql
immutable strict parallel safe
security invoker
set search_path from current
-- PL/pgSQL, not a SQL body: computed in an index entry and a trigger for every write of a docs
-- URL, where a host without Punycode labels (nearly every one) is its own Unicode form.
as $$
declare
  v_host constant text := payrail._url_host(p_url);
begin
  if pg_catalog.strpos(v_host, 'xn--') operator(pg_catalog.=) 0 then
    return payrail._lookalike_key(v_host);
  end if;
  return payrail._lookalike_key(payrail._unicode_host(v_host));
end
$$;

comment on function payrail._host_lookalike_key(text) is
$$What an https URL's host looks like (payrail._lookalike_key of its Unicode form): two hosts with the same key look alike.$$;

-- Rebuild the indexes that compute with these functions or 016-unicode_security.sql's data, and
-- check the rows of the constraints that call them again, if this run changed any of them.
do $$ begin perform payrail._rebuild_text_rule_dependents(); end $$;
