-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail._offending_urls_in_words(p_constraint text, p_urls text[])
returns text
language sql
stable
security invoker
set search_path from current
-- Which entries of a URL list break the rule of p_constraint, so a refusal of a list of ten says
-- which one: each as JSON (quoted, control characters escaped), cut at 200 characters, the first five.
return (
  with offending as (
    select u.url, pg_catalog.row_number() over (order by u.ordinal) as n
    from pg_catalog.unnest(p_urls) with ordinality as u(url, ordinal)
    where case
      when p_constraint operator(pg_catalog.=) 'provider_methods_urls_https_check'
        then not coalesce(payrail._is_https_url(u.url), false)
      when p_constraint operator(pg_catalog.=) 'provider_methods_urls_ascii_host_check'
        then u.url is not null and not payrail._has_ascii_host(u.url)
      when p_constraint operator(pg_catalog.=) 'provider_methods_urls_unique_check'
        then exists (select from pg_catalog.unnest(p_urls) with ordinality as e(url, ordinal)
                     where e.url operator(pg_catalog.=) u.url and e.ordinal operator(pg_catalog.<) u.ordinal)
      else false
    end
  )
  select case when pg_catalog.count(*) operator(pg_catalog.=) 0 then ''
    else pg_catalog.format('; %s: %s%s',
           case when p_constraint operator(pg_catalog.=) 'provider_methods_urls_unique_check' then 'listed twice' else 'not so' end,
           pg_catalog.string_agg(coalesce(pg_catalog.to_json(pg_catalog."left"(o.url, 200))::text, 'an empty entry'), ', ' order by o.n)
             filter (where o.n operator(pg_catalog.<=) 5),
           case when pg_catalog.count(*) operator(pg_catalog.>) 5
                then pg_catalog.format(' and %s more', pg_catalog.count(*) operator(pg_catalog.-) 5) else '' end)
    end
  from offending as o
);

comment on function payrail._offending_urls_in_words(text, text[]) is
$$The entries of p_urls that break the URL-list rule p_constraint (https, ASCII host, listed twice), in words to follow the rule's: '; not so: "http://x"'. Empty for any other constraint.$$;

create or replace function payrail.check_provider_method(
  p_id bigint,
  p_provider text,
  p_method text,
  p_urls text[],
  p_docs_url text,
  p_guidance text,
  p_mixed_scripts boolean default null,
  p_source text default null
)
returns table (constraint_name text, fields text[], rule text, remedy text)
language plpgsql
stable
security invoker
set search_path from current
-- Its one table read is a lookup by the unique key: by its index, whatever the statistics say.
set enable_seqscan = off
as $$
declare
  v_row payrail.provider_methods;
  v_constraint record;
  v_holds boolean;
begin
  -- The record as it would be stored (the triggers store names canonical), as a draft.
  v_row.provider := payrail._canonical_name(p_provider);
  v_row.method := payrail._canonical_name(p_method);
  v_row.urls := p_urls;
  v_row.docs_url := p_docs_url;
  v_row.guidance := p_guidance;
  v_row.enabled := false;
  v_row.version := 1;
  -- NULL: the record's own word (a new record has none), as payrail.save_provider_method keeps it.
  v_row.mixed_scripts := coalesce(p_mixed_scripts,
                                  (select pm.mixed_scripts from payrail.provider_methods as pm where pm.id operator(pg_catalog.=) p_id),
                                  false);
  -- NULL: the record's (a new record: the column's default, which holds).
  v_row.source := coalesce(p_source, (select pm.source from payrail.provider_methods as pm where pm.id operator(pg_catalog.=) p_id));
  -- Each check constraint's own expression, so the table's constraints stay the one statement of
  -- every rule. A check passes when it is true or NULL, as PostgreSQL judges it. Printed and run
  -- on pg_catalog alone (until this function returns): every other name prints with its schema,
  -- and an operator the print leaves bare (its implicit casts unprinted) is found in pg_catalog.
  perform pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
  for v_constraint in
    select c.conname::text as name, pg_catalog.pg_get_expr(c.conbin, c.conrelid) as expression
    from pg_catalog.pg_constraint as c
    where c.conrelid operator(pg_catalog.=) 'payrail.provider_methods'::pg_catalog.regclass and c.contype operator(pg_catalog.=) 'c'
    order by c.conname
  loop
    execute 'select ' operator(pg_catalog.||) v_constraint.expression operator(pg_catalog.||) ' from (select ($1).*) as provider_methods'
      into v_holds using v_row;
    if not coalesce(v_holds, true) then
      return query
        select v_constraint.name, coalesce(r.fields, '{}'),
               coalesce(r.rule, 'breaks ' operator(pg_catalog.||) v_constraint.name)
                 -- Which scripts, where the rule is about mixing them.
                 operator(pg_catalog.||) case when v_constraint.name operator(pg_catalog.=) 'provider_methods_scripts_check'
                                              then pg_catalog.format(' ("%s" is %s; "%s" is %s)',
                                                                     v_row.provider, payrail._scripts_in_words(v_row.provider),
                                                                     v_row.method, payrail._scripts_in_words(v_row.method))
                                              else '' end
                 -- Which URL of the list, where the rule is about each of them.
                 operator(pg_catalog.||) payrail._offending_urls_in_words(v_constraint.name, v_row.urls),
               coalesce(r.remedy, '')
        from (select) as one left join payrail.rules as r on r.constraint_name operator(pg_catalog.=) v_constraint.name;
    end if;
  end loop;
  -- The name taken, naming the record that holds it (as the lookalike rule does).
  return query
    select r.constraint_name, r.fields,
           r.rule operator(pg_catalog.||) pg_catalog.format(': %s, "%s / %s"',
             case when payrail._written_by_this_transaction(pm.id) then 'another record of this same change (another line of the same file)'
                  else 'record ' operator(pg_catalog.||) pm.id end,
             pm.provider, pm.method),
           r.remedy
    from payrail.provider_methods as pm
    join payrail.rules as r on r.constraint_name operator(pg_catalog.=) 'provider_methods_provider_method_key'
    where payrail._normalize_name(pm.provider) operator(pg_catalog.=) payrail._normalize_name(v_row.provider)
      and payrail._normalize_name(pm.method) operator(pg_catalog.=) payrail._normalize_name(v_row.method)
      and coalesce(pm.id operator(pg_catalog.<>) p_id, true)
    limit 1;
  -- The lookalike rule (tg_provider_methods__refuse_lookalikes), naming the record imitated.
  return query
    select r.constraint_name, r.fields,
           payrail._lookalike_in_words(l.field, case when l.field operator(pg_catalog.=) 'provider' then v_row.provider
                                                      when l.field operator(pg_catalog.=) 'method' then v_row.method
                                                      else v_row.docs_url end, l.other),
           r.remedy
    from payrail._lookalikes(p_id, v_row.provider, v_row.method,
                             case when payrail._is_https_url(v_row.docs_url) then v_row.docs_url end) as l
    join payrail.rules as r on r.constraint_name operator(pg_catalog.=) payrail._lookalike_constraint(l.field)
    order by l.field;
end
$$;

comment on function payrail.check_provider_method(bigint, text, text, text[], text, text, boolean, text) is
$$Every rule a record would break, all at once: one row per broken rule, with its fields and its words (payrail.rules).

p_id is the record the values would be saved as (NULL: a new record), so its own name does not
count as taken; p_mixed_scripts is the operator's word that the names mix scripts on purpose,
p_source where the record came from (NULL: the record's own).
Judges the public fields as a draft would be stored, and whether a name or docs host looks like
another record's (naming it); writes nothing. The write
path asks it when the database refused a save, so every wrong field is marked in one go:
select * from payrail.check_provider_method(null, 'Acme', 'Geocode', '{http://x}', null, '');$$;
