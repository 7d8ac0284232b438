-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- Advice on a record's fit to the seed's editorial template for guidance: a Purpose line that says
-- what the method does, an Instructions line, a Notes line, plain text, a docs URL (DESIGN.md:
-- "advice and filters for operators, never ranking input"). Advice, never a rule: no constraint
-- or trigger calls these functions, so nothing is refused or changed by them, and search reads
-- none of them (its functions name none). Operators read it (psql, the backoffice, `payrail-embedder
-- advise`, `show`, `import`'s summary); agents cannot (900-grants.sql). Every face asks these
-- functions: the rules have no other copy. docs/operators.md, "Advice on the editorial template",
-- states each rule; db/tests/180-template_advice.sql holds them to it.

create or replace function payrail.get_template_advice_kinds()
returns table (code text, summary text, fix text)
language sql
immutable parallel safe
security invoker
set search_path from current
-- The order of the template (Purpose, Instructions, Notes), then the text as a whole, then the
-- docs URL: the order every face lists advice in.
as $$
  select k.code, k.summary, k.fix
  from (values
    (1, 'no_purpose', 'no Purpose line',
     'Begin the guidance with a line "Purpose: ..." that says in plain words what the method does, as an agent would ask for it.'),
    (2, 'vague_purpose', 'a vague Purpose line',
     'Say in at least 4 words of your own what the method does, in the words an agent would ask with ("Send a text message to a phone number"): no URL, no code, not only its name.'),
    (3, 'no_instructions', 'no Instructions line',
     'Add a line "Instructions: ..." that says how to call it: the endpoint, the authentication, the parameters that matter.'),
    (4, 'no_notes', 'no Notes line',
     'Add a line "Notes: ..." with what else an agent should know: limits, costs, pitfalls; payment requirements go to the payment agent.'),
    (5, 'markup', 'guidance in Markdown or HTML',
     'Write plain text: a link''s address after its words (Docs: https://...), no marks around words (**, *, `), no headings, tables, code fences or HTML.'),
    (6, 'no_docs_url', 'no docs URL',
     'Set the Docs URL to the official documentation page of the method (https://...).')
  ) as k(position, code, summary, fix)
  order by k.position
$$;

comment on function payrail.get_template_advice_kinds() is
$$Every piece of advice the editorial template check gives: its stable code, a summary ("N records have <summary>") and what to do.

In the order advice is listed. Advice never refuses a save and never changes search:
select * from payrail.get_template_advice_kinds();$$;

create or replace function payrail._template_words(p_text text)
returns text[]
language sql
immutable strict parallel safe
security invoker
set search_path from current
-- White space is the registry's (payrail._white_space_characters), punctuation ASCII's: both
-- spelt out, since \w, \s and [[:punct:]] follow the server's locale.
return array(
  select w.word
  from pg_catalog.regexp_split_to_table(payrail._fold_case(p_text),
         '[' operator(pg_catalog.||) payrail._white_space_characters() operator(pg_catalog.||) E'!-/:-@[-`{-~]+') as w(word)
  where w.word operator(pg_catalog.<>) '');

comment on function payrail._template_words(text) is
$$The words of a text, case-folded: the runs of characters that are neither white space nor ASCII punctuation.$$;

create or replace function payrail._template_word_count(p_words text[])
returns integer
language plpgsql
immutable strict parallel safe
security invoker
set search_path from current
-- Scripts written without spaces between words (Chinese, Japanese, Thai, Lao, Khmer, Burmese)
-- would count a whole sentence as one word: there, every two letters count as one (rounded
-- up), about the length of a word in Chinese. Unicode's scripts, 016-unicode_security.sql,
-- looked up only for words that are not ASCII.
as $$
declare
  v_word text;
  v_unspaced integer;
  v_count integer := 0;
begin
  if pg_catalog.array_to_string(p_words, '') operator(pg_catalog.!~) '[^\u0001-\u007f]' then
    return pg_catalog.cardinality(p_words);
  end if;
  foreach v_word in array p_words loop
    select pg_catalog.count(*) into v_unspaced
    from pg_catalog.regexp_split_to_table(v_word, '') as c(character)
    where c.character operator(pg_catalog.~) '[^\u0001-\u007f]'
      and payrail._script_set(c.character) operator(pg_catalog.&&) '{Hani,Hira,Kana,Thai,Laoo,Khmr,Mymr}'::text[];
    v_count := v_count operator(pg_catalog.+)
               case when v_unspaced operator(pg_catalog.=) 0 then 1
                    else (v_unspaced operator(pg_catalog.+) 1) operator(pg_catalog./) 2 end;
  end loop;
  return v_count;
end
$$;

comment on function payrail._template_word_count(text[]) is
$$How many words p_words (payrail._template_words of a text) are, two letters of a script written without spaces (Han, Hiragana, Katakana, Thai, Lao, Khmer, Myanmar) counting as one.$$;

create or replace function payrail._vague_purpose_in_words(p_purpose text, p_provider text, p_method text)
returns text
language plpgsql
immutable parallel safe
security invoker
set search_path from current
as $$
declare
  v_purpose_words constant text[] := payrail._template_words(coalesce(p_purpose, ''));
  v_words constant integer := payrail._template_word_count(v_purpose_words);
  -- URLs and HTML names are ASCII: compared with ASCII letters folded, the same in every locale.
  v_folded text := pg_catalog.translate(coalesce(p_purpose, ''), 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
  v_reasons text[] := '{}';
begin
  if v_words operator(pg_catalog.<) 4 then
    v_reasons := v_reasons operator(pg_catalog.||)
                 pg_catalog.format('it has %s word%s (at least 4)', v_words, case when v_words operator(pg_catalog.=) 1 then '' else 's' end);
  end if;
  if v_words operator(pg_catalog.>) 0
     and v_purpose_words operator(pg_catalog.<@)
         (payrail._template_words(coalesce(p_provider, '')) operator(pg_catalog.||) payrail._template_words(coalesce(p_method, ''))) then
    v_reasons := v_reasons operator(pg_catalog.||) 'it only repeats the provider''s and method''s names'::text;
  end if;
  if v_folded operator(pg_catalog.~) '(https?://|www\.)' then
    v_reasons := v_reasons operator(pg_catalog.||) 'it holds a URL'::text;
  end if;
  if v_folded operator(pg_catalog.~) ('[`{}]|(^|[' operator(pg_catalog.||) payrail._white_space_characters() operator(pg_catalog.||) '])/[a-z0-9_{]') then
    v_reasons := v_reasons operator(pg_catalog.||) 'it holds code (`...`, {...} or a /path)'::text;
  end if;
  if pg_catalog.cardinality(v_reasons) operator(pg_catalog.=) 0 then
    return null;
  end if;
  return 'The Purpose line does not say what the method does in words an agent would ask with: '
         operator(pg_catalog.||) pg_catalog.array_to_string(v_reasons, '; ') operator(pg_catalog.||) '.';
end
$$;

comment on function payrail._vague_purpose_in_words(text, text, text) is
$$Why a Purpose line's text (after "Purpose:") does not say what the method does, in words; NULL when it does.

Vague: fewer than 4 words (payrail._template_word_count); words all among the provider's and
method's (only the names again); a URL (http://, https://, www.); code (a backtick, a brace, or
a word starting with "/": an endpoint's path).$$;

create or replace function payrail._markup_in_words(p_guidance text)
returns text
language plpgsql
immutable strict parallel safe
security invoker
set search_path from current
-- Each pattern reads one line at a time ((?n): ^ and $ at line breaks, no match across one).
-- An ordinary list ("- item", "1. item"), a URL written out, a lone * (5 * 3), underscores
-- (snake_case, __init__) and <placeholders> are plain text.
as $$
declare
  v_mark record;
  v_kinds text[] := '{}';
  v_folded text;
begin
  -- Text without a mark any pattern needs (nearly all of it) is plain: one scan decides.
  if p_guidance operator(pg_catalog.!~) '[][`*#|~<&]' then
    return null;
  end if;
  -- HTML's names are ASCII: compared with ASCII letters folded, the same in every locale.
  v_folded := pg_catalog.translate(p_guidance, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
  for v_mark in
    select m.kind, m.pattern, m.folded
    from (values
      (1, 'a code fence (```)', '(?n)^[ \t]*(```|~~~)', false),
      (2, 'a heading (# ...)', '(?n)^[ \t]{0,3}#{1,6}[ \t]+[^ \t]', false),
      (3, 'a table (|---|)', '(?n)^[ \t]*(\|[ \t]*:?-{3,}:?[ \t]*)+\|?[ \t]*$|^[ \t]*:?-{3,}:?[ \t]*(\|[ \t]*:?-{3,}:?[ \t]*)+\|?[ \t]*$', false),
      (4, 'a link ([text](address))', '(?n)\[[^]]+\]\([^) \t]+\)', false),
      (5, 'bold (**text**)', '(?n)\*\*[^* \t]([^*]*[^* \t])?\*\*', false),
      (6, 'emphasis (*text*)', '(?n)(^|[^A-Za-z0-9*\\])\*[^* \t]([^*]*[^* \t])?\*([^A-Za-z0-9*]|$)', false),
      (7, 'code (`text`)', '(?n)`[^`]+`', false),
      (8, 'HTML tags (<b>, <br>)',
       '(?n)</?(a|abbr|b|big|blockquote|br|center|code|del|div|em|font|h[1-6]|hr|i|img|ins|li|ol|p|pre|s|small|span|strike|strong|sub|sup|table|tbody|td|th|thead|tr|tt|u|ul)([ \t/][^<>]*)?>',
       true),
      (9, 'HTML entities (&amp;)', '&(amp|lt|gt|quot|apos|nbsp|#[0-9]+|#x[0-9a-f]+);', true)
    ) as m(position, kind, pattern, folded)
    order by m.position
  loop
    if (case when v_mark.folded then v_folded else p_guidance end) operator(pg_catalog.~) v_mark.pattern then
      v_kinds := v_kinds operator(pg_catalog.||) v_mark.kind;
    end if;
  end loop;
  if pg_catalog.cardinality(v_kinds) operator(pg_catalog.=) 0 then
    return null;
  end if;
  return pg_catalog.array_to_string(v_kinds, ', ');
end
$$;

comment on function payrail._markup_in_words(text) is
$$The Markdown and HTML a guidance text holds, in words ("a link ([text](address)), bold (**text**)"); NULL for plain text.

Markdown: a code fence (``` or ~~~ opening a line), an ATX heading (# to ###### and a space),
a table's delimiter row (|---|---|), a link or image ([text](address)), bold (**text**),
emphasis (*text*), inline code (`text`). HTML: a tag of a common element (<b>, </p>, <br/>) or a
character entity (&amp;, &#39;). Not Markdown: lists, URLs written out, a lone *, underscores, <placeholders>.$$;

create or replace function payrail.advise_provider_method(p_provider text, p_method text, p_guidance text, p_docs_url text)
returns table (code text, advice text, fix text)
language plpgsql
immutable parallel safe
security invoker
set search_path from current
as $$
declare
  v_line text;
  v_label text;
  v_purpose text;
  v_has_purpose boolean := false;
  v_has_instructions boolean := false;
  v_has_notes boolean := false;
begin
  -- A template line: a line that starts, after any white space, with its label and a colon,
  -- the label in any ASCII case ("Purpose:", "  purpose:"). The first Purpose line is the one judged.
  foreach v_line in array pg_catalog.string_to_array(coalesce(p_guidance, ''), E'\n') loop
    v_line := pg_catalog.ltrim(v_line, payrail._white_space_characters());
    continue when pg_catalog.strpos(v_line, ':') operator(pg_catalog.=) 0;
    v_label := pg_catalog.translate(pg_catalog.split_part(v_line, ':', 1), 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
    if v_label operator(pg_catalog.=) 'purpose' and not v_has_purpose then
      v_has_purpose := true;
      v_purpose := payrail._trim_white_space(pg_catalog.substr(v_line, pg_catalog.strpos(v_line, ':') operator(pg_catalog.+) 1));
    elsif v_label operator(pg_catalog.=) 'instructions' then
      v_has_instructions := true;
    elsif v_label operator(pg_catalog.=) 'notes' then
      v_has_notes := true;
    end if;
  end loop;
  return query
  select k.code, f.advice, k.fix
  from payrail.get_template_advice_kinds() with ordinality as k(code, summary, fix, position)
  join (values
    ('no_purpose', case when not v_has_purpose then 'The guidance has no Purpose line (a line that starts "Purpose:").' end),
    ('vague_purpose', case when v_has_purpose then payrail._vague_purpose_in_words(v_purpose, p_provider, p_method) end),
    ('no_instructions', case when not v_has_instructions then 'The guidance has no Instructions line (a line that starts "Instructions:").' end),
    ('no_notes', case when not v_has_notes then 'The guidance has no Notes line (a line that starts "Notes:").' end),
    ('markup', 'The guidance is written in Markdown or HTML: ' operator(pg_catalog.||) payrail._markup_in_words(coalesce(p_guidance, ''))
               operator(pg_catalog.||) '. Agents read it as plain text, marks and all.'),
    ('no_docs_url', case when p_docs_url is null then 'The record has no docs URL: agents are told to read the official docs before they call.' end)
  ) as f(code, advice) on f.code operator(pg_catalog.=) k.code
  where f.advice is not null
  order by k.position;
end
$$;

comment on function payrail.advise_provider_method(text, text, text, text) is
$$Advice on how a record's fields fit the editorial template for guidance: one row per piece of advice (code, advice in words, what to do), none when it fits.

Advice never refuses a save and never changes search. Takes the fields as they are, saved or
not (a form as typed). The rules, in the order of payrail.get_template_advice_kinds():
- no_purpose: no line starts "Purpose:" (after white space; the label in any ASCII case);
- vague_purpose: the first Purpose line's text is vague (payrail._vague_purpose_in_words);
- no_instructions, no_notes: no line starts "Instructions:", "Notes:";
- markup: the guidance holds Markdown or HTML (payrail._markup_in_words);
- no_docs_url: the docs URL is NULL.
select * from payrail.advise_provider_method('Acme', 'Geocode', 'Purpose: geocode', null);$$;

create or replace function payrail.advise_provider_methods(p_record_ids bigint[] default null)
returns table (record_id bigint, provider text, method text, enabled boolean, code text, advice text, fix text)
language sql
stable parallel safe
security invoker
set search_path from current
-- Every record (a scan, in list order), or each id of p_record_ids looked up by its key ("offset
-- 0": a probe of the primary key whatever the statistics say).
as $$
  select pm.id, pm.provider, pm.method, pm.enabled, a.code, a.advice, a.fix
  from (select p.id, p.provider, p.method, p.enabled, p.guidance, p.docs_url
        from payrail.provider_methods as p where p_record_ids is null
        union all
        select r.id, r.provider, r.method, r.enabled, r.guidance, r.docs_url
        from (select distinct u.id from pg_catalog.unnest(p_record_ids) as u(id)) as u
        cross join lateral (select p.id, p.provider, p.method, p.enabled, p.guidance, p.docs_url
                            from payrail.provider_methods as p where p.id operator(pg_catalog.=) u.id offset 0) as r) as pm
  cross join lateral payrail.advise_provider_method(pm.provider, pm.method, pm.guidance, pm.docs_url) with ordinality as a(code, advice, fix, position)
  order by pg_catalog.lower(pm.provider), pg_catalog.lower(pm.method), pm.id, a.position
$$;

comment on function payrail.advise_provider_methods(bigint[]) is
$$Advice on stored records (payrail.advise_provider_method): every record's, or those of p_record_ids; one row per record and piece of advice.

Drafts included; records that fit the template give no row. By provider and method ignoring case:
select provider, method, code from payrail.advise_provider_methods() where code = 'no_purpose';
select * from payrail.advise_provider_methods(array[42, 7]);$$;

create or replace function payrail.count_template_advice(p_record_ids bigint[] default null)
returns table (code text, summary text, fix text, enabled bigint, drafts bigint)
language sql
stable parallel safe
security invoker
set search_path from current
as $$
  select k.code, k.summary, k.fix,
         pg_catalog.count(a.record_id) filter (where a.enabled),
         pg_catalog.count(a.record_id) filter (where not a.enabled)
  from payrail.get_template_advice_kinds() with ordinality as k(code, summary, fix, position)
  left join payrail.advise_provider_methods(p_record_ids) as a on a.code operator(pg_catalog.=) k.code
  group by k.code, k.summary, k.fix, k.position
  order by k.position
$$;

comment on function payrail.count_template_advice(bigint[]) is
$$How many records get each piece of advice, enabled and drafts apart: every kind (payrail.get_template_advice_kinds), zero included, over every record or those of p_record_ids.

"412 records have no Purpose line" is enabled + drafts and summary:
select code, enabled + drafts as records, summary from payrail.count_template_advice();$$;
