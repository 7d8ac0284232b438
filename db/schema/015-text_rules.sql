-- Immutable helpers that the table's constraints, generated column and indexes use,
-- so they are created before the table.

create or replace function payrail._trim_white_space(p_text text)
returns text
language sql
immutable strict parallel safe
set search_path from current
-- Unicode white space too (no-break space, line separator, ...), not only ASCII.
return pg_catalog.regexp_replace(
  p_text,
  '^[\s\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+|[\s\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+$',
  '', 'g');

comment on function payrail._trim_white_space(text) is
$$Removes leading and trailing white space, Unicode white space included.$$;

create or replace function payrail._canonical_name(p_name text)
returns text
language sql
immutable strict parallel safe
set search_path from current
-- Spaces only, not _trim_white_space's \s: a tab or line break in a name is refused by
-- _is_valid_name, never silently dropped.
return pg_catalog.normalize(
  pg_catalog.regexp_replace(
    p_name,
    '^[ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+|[ \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+$',
    '', 'g'),
  'NFC');

comment on function payrail._canonical_name(text) is
$$A provider or method name as it is stored: without leading or trailing spaces (Unicode ones too) and in Unicode NFC.

Applied by the trigger tg_provider_methods__canonicalize_names, and by the write path before it
embeds, so a vector is always made from the text that is stored.$$;

create or replace function payrail._normalize_name(p_name text)
returns text
language sql
immutable strict parallel safe
set search_path from current
return pg_catalog.lower(pg_catalog.regexp_replace(payrail._trim_white_space(p_name), '[\s\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+', ' ', 'g'));

comment on function payrail._normalize_name(text) is
$$Normalizes a name for comparison: trimmed, case-folded, runs of white space collapsed.

Used by the (provider, method) uniqueness rule and by the search name path.$$;

create or replace function payrail._content_hash(p_provider text, p_method text, p_guidance text)
returns bytea
language sql
immutable strict parallel safe
set search_path from current
-- U+001F cannot occur in these fields (the control-character rules), so the join is unambiguous.
-- payrail_embedder computes the same digest before it saves a vector.
return pg_catalog.sha256(pg_catalog.convert_to(p_provider || E'\x1f' || p_method || E'\x1f' || p_guidance, 'UTF8'));

comment on function payrail._content_hash(text, text, text) is
$$SHA-256 of the content an embedding is made from: provider, method and guidance.

An embedding is current only while its recorded content hash equals this.$$;

create or replace function payrail._is_valid_name(p_name text)
returns boolean
language sql
immutable strict parallel safe
set search_path from current
return pg_catalog.char_length(payrail._trim_white_space(p_name)) between 1 and 120
   and p_name !~ '[\u0001-\u001f\u007f-\u009f]';

comment on function payrail._is_valid_name(text) is
$$True for a provider or method name: 1..120 characters after trimming, no control characters.$$;

create or replace function payrail._is_https_url(p_url text)
returns boolean
language sql
immutable strict parallel safe
set search_path from current
-- An absolute https URL with a non-empty host and no user info (https://docs.example@evil.example/
-- goes to evil.example); no white space or control character anywhere.
-- White space as _trim_white_space counts it: \s alone follows the server's locale (no U+00A0,
-- U+2007 or U+202F in C.UTF-8, ASCII only in C).
return pg_catalog.char_length(p_url) <= 2048
   and p_url ~* '^https://[^/?#@\s]+([/?#]|$)'
   and p_url !~ '[\s\u0001-\u001f\u007f-\u009f\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]';

comment on function payrail._is_https_url(text) is
$$True for an absolute https:// URL of at most 2,048 characters with a host, no user info and no white space.$$;

create or replace function payrail._are_https_urls(p_urls text[])
returns boolean
language sql
immutable strict parallel safe
set search_path from current
return not exists (select from pg_catalog.unnest(p_urls) as u(url) where not coalesce(payrail._is_https_url(u.url), false));

comment on function payrail._are_https_urls(text[]) is
$$True when every element of the array is a valid https URL (see _is_https_url) and none is NULL.$$;

create or replace function payrail._has_duplicates(p_values text[])
returns boolean
language sql
immutable strict parallel safe
set search_path from current
return pg_catalog.cardinality(p_values) <> (select pg_catalog.count(distinct v) from pg_catalog.unnest(p_values) as v);

comment on function payrail._has_duplicates(text[]) is
$$True when the array holds the same value twice.$$;
