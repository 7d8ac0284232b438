-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- Golden queries' rules and their write functions (the tables: db/schema/080-golden_queries.sql).

create or replace function payrail.tg_golden_queries__stamp_added()
returns trigger
language plpgsql
volatile
security invoker
set search_path from current
as $$
begin
  if tg_op operator(pg_catalog.=) 'INSERT' then
    new.added_by := payrail._author();
    -- The clock, not the transaction's start: each query of a long import shows its own time.
    new.added_at := pg_catalog.clock_timestamp();
  else
    new.added_by := old.added_by;
    new.added_at := old.added_at;
  end if;
  return new;
end
$$;

comment on function payrail.tg_golden_queries__stamp_added() is
$$Stamps who added a golden query and when; nobody sets or changes either.$$;

create or replace trigger tg_golden_queries__stamp_added
  before insert or update on payrail.golden_queries
  for each row execute function payrail.tg_golden_queries__stamp_added();

create or replace function payrail._refuse_golden_query_without_records(p_query text)
returns void
language plpgsql
immutable
security invoker
set search_path from current
as $$
begin
  raise exception using
    errcode = 'check_violation',
    constraint = 'golden_queries_relevant_check',
    schema = 'payrail',
    table = 'golden_queries',
    message = pg_catalog.format('golden query "%s" names no relevant record: it needs at least one', p_query),
    hint = 'Name the records it should find (payrail.add_golden_query(query, record_ids)), or remove the query.';
end
$$;

comment on function payrail._refuse_golden_query_without_records(text) is
$$Raises golden_queries_relevant_check's refusal (23514) of the golden query p_query, in words: its one statement.$$;

create or replace function payrail.tg_golden_queries__check_relevant()
returns trigger
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_golden_query_id bigint;
  v_query text;
begin
  if tg_table_name operator(pg_catalog.=) 'golden_queries' then
    v_golden_query_id := new.id;
  else
    v_golden_query_id := old.golden_query_id;
  end if;
  select g.query into v_query
  from payrail.golden_queries as g
  where g.id operator(pg_catalog.=) v_golden_query_id
    and not exists (select from payrail.golden_query_records as r where r.golden_query_id operator(pg_catalog.=) g.id);
  if found then
    perform payrail._refuse_golden_query_without_records(v_query);
  end if;
  return null;
end
$$;

comment on function payrail.tg_golden_queries__check_relevant() is
$$Refuses, at commit, a golden query left without a relevant record (golden_queries_relevant_check).$$;

-- At commit: a golden query is inserted before its records, and its records may be replaced in
-- the same transaction. Constraint triggers cannot be created "or replace": replaced only when changed.
select payrail._ensure_trigger('payrail.golden_queries', 'golden_queries_relevant_check', $$
  create constraint trigger %1$I
    after insert on %2$s
    deferrable initially deferred
    for each row execute function payrail.tg_golden_queries__check_relevant()$$);
select payrail._ensure_trigger('payrail.golden_query_records', 'golden_queries_relevant_check', $$
  create constraint trigger %1$I
    after update or delete on %2$s
    deferrable initially deferred
    for each row execute function payrail.tg_golden_queries__check_relevant()$$);

create or replace function payrail.tg_provider_methods__keep_golden_queries()
returns trigger
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_count bigint;
  v_queries text;
begin
  -- The first five by age, each cut to 100 characters: enough to find them (golden list), short
  -- enough for one line.
  select pg_catalog.count(*),
         pg_catalog.string_agg(pg_catalog.format('"%s"', case when pg_catalog.char_length(g.query) operator(pg_catalog.>) 100
                                                               then pg_catalog.left(g.query, 99) operator(pg_catalog.||) '…'
                                                               else g.query end),
                               ', ' order by g.id) filter (where g.number operator(pg_catalog.<=) 5)
  into v_count, v_queries
  from (select q.id, q.query, pg_catalog.row_number() over (order by q.id) as number
        from payrail.golden_query_records as r
        join payrail.golden_queries as q on q.id operator(pg_catalog.=) r.golden_query_id
        where r.record_id operator(pg_catalog.=) old.id) as g;
  if v_count operator(pg_catalog.>) 0 then
    raise exception using
      errcode = 'foreign_key_violation',
      constraint = 'golden_query_records_record_id_fkey',
      schema = 'payrail',
      table = 'golden_query_records',
      message = pg_catalog.format('provider method "%s / %s" is not deleted: %s golden %s %s it: %s%s',
        old.provider, old.method, v_count,
        case when v_count operator(pg_catalog.=) 1 then 'query' else 'queries' end,
        case when v_count operator(pg_catalog.=) 1 then 'names' else 'name' end,
        v_queries,
        case when v_count operator(pg_catalog.>) 5 then pg_catalog.format(' and %s more', v_count operator(pg_catalog.-) 5) else '' end),
      hint = 'Delete it with its golden queries (payrail.delete_provider_method(id, version, p_with_golden_queries => true): '
             'it leaves those queries, and a query that names no other record goes too), or relabel them first.';
  end if;
  return old;
end
$$;

comment on function payrail.tg_provider_methods__keep_golden_queries() is
$$Refuses the deletion of a record that golden queries name, saying which (golden_query_records_record_id_fkey in words).$$;

create or replace trigger tg_provider_methods__keep_golden_queries
  before delete on payrail.provider_methods
  for each row execute function payrail.tg_provider_methods__keep_golden_queries();

create or replace function payrail._golden_query_named(p_query text)
returns setof payrail.golden_queries
language sql
stable
security invoker
set search_path from current
-- A lookup through golden_queries_query_key, whatever the statistics say.
set enable_seqscan = off
as $$
  select g.* from payrail.golden_queries as g
  where pg_catalog.md5(payrail._normalize_name(g.query)) operator(pg_catalog.=) pg_catalog.md5(payrail._normalize_name(p_query))
$$;

comment on function payrail._golden_query_named(text) is
$$The golden query that is the same as p_query (compared as golden_queries_query_key compares them), if any.$$;

create or replace function payrail.add_golden_query(p_query text, p_record_ids bigint[], p_language text default null)
returns bigint
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_existing payrail.golden_queries;
  v_repeated payrail.provider_methods;
  v_missing text;
  v_id bigint;
begin
  select * into v_existing from payrail._golden_query_named(p_query);
  if found then
    raise exception using
      errcode = 'unique_violation',
      constraint = 'golden_queries_query_key',
      schema = 'payrail',
      table = 'golden_queries',
      message = pg_catalog.format('golden query "%s" exists already (added %s by %s)',
                                  v_existing.query, pg_catalog.to_char(v_existing.added_at, 'YYYY-MM-DD HH24:MI:SS TZ'), v_existing.added_by),
      hint = 'Queries compare ignoring case, compatibility forms, invisible characters and runs of white space. '
             'To label it anew, remove it (payrail.remove_golden_query) and add it again.';
  end if;
  if p_record_ids is null or pg_catalog.cardinality(p_record_ids) operator(pg_catalog.=) 0 then
    perform payrail._refuse_golden_query_without_records(p_query);
  end if;
  if pg_catalog.cardinality(p_record_ids) operator(pg_catalog.>) 100 then
    raise exception using
      errcode = 'check_violation',
      constraint = 'golden_query_records_ordinal_check',
      schema = 'payrail',
      table = 'golden_query_records',
      message = pg_catalog.format('golden query "%s" names %s relevant records; the limit is 100', p_query, pg_catalog.cardinality(p_record_ids)),
      hint = 'Name the records it should find first: eval counts the first three answers.';
  end if;
  -- Each a lookup by id ("offset 0": never a join that might scan every record).
  select pg_catalog.string_agg(coalesce(u.id::text, 'NULL'), ', ' order by u.n) into v_missing
  from pg_catalog.unnest(p_record_ids) with ordinality as u(id, n)
  where not exists (select from payrail.provider_methods as pm where pm.id operator(pg_catalog.=) u.id offset 0);
  if v_missing is not null then
    raise exception using
      errcode = 'foreign_key_violation',
      constraint = 'golden_query_records_record_id_fkey',
      schema = 'payrail',
      table = 'golden_query_records',
      message = pg_catalog.format('golden query "%s" names no provider method with id %s', p_query, v_missing),
      hint = 'Name records that exist (payrail.provider_methods.id); a deleted record cannot be relevant.';
  end if;
  select pm.* into v_repeated
  from payrail.provider_methods as pm
  where pm.id operator(pg_catalog.=) (
    select u.id from pg_catalog.unnest(p_record_ids) with ordinality as u(id, n)
    group by u.id having pg_catalog.count(*) operator(pg_catalog.>) 1 order by pg_catalog.min(u.n) limit 1);
  if found then
    raise exception using
      errcode = 'unique_violation',
      constraint = 'golden_query_records_pkey',
      schema = 'payrail',
      table = 'golden_query_records',
      message = pg_catalog.format('golden query "%s" names provider method "%s / %s" twice', p_query, v_repeated.provider, v_repeated.method),
      hint = 'Name each relevant record once.';
  end if;

  insert into payrail.golden_queries as g (query, language) values (p_query, p_language) returning g.id into v_id;
  insert into payrail.golden_query_records (golden_query_id, record_id, ordinal)
  select v_id, u.id, u.n from pg_catalog.unnest(p_record_ids) with ordinality as u(id, n);
  return v_id;
end
$$;

comment on function payrail.add_golden_query(text, bigint[], text) is
$$Adds a golden query: a question, the records it should find (their ids, in the order given) and the language it is in (optional); returns its id.

Refused, in words and naming the rule, when the same query exists already (golden_queries_query_key:
compared as names are), when it names no record, more than 100, a record twice or one that does
not exist; the query obeys the search query's rules (golden_queries_query_check), the language
eval's rule for a tag (golden_queries_language_check: 2 to 8 letters, digits and hyphens). Who
and when are stamped. Golden queries never change what search answers:
select payrail.add_golden_query('charge a card in euros', array[42, 7]);
select payrail.add_golden_query('eine Karte in Euro belasten', array[42], 'de');$$;

create or replace function payrail.remove_golden_query(p_query text)
returns bigint
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_id bigint;
begin
  delete from payrail.golden_queries as g
  where g.id operator(pg_catalog.=) (select n.id from payrail._golden_query_named(p_query) as n)
  returning g.id into v_id;
  if v_id is null then
    raise exception using
      errcode = 'no_data_found',
      message = pg_catalog.format('there is no golden query "%s"', p_query),
      hint = 'Queries compare ignoring case, compatibility forms, invisible characters and runs of white space; '
             '`payrail-embedder golden list` lists them.';
  end if;
  return v_id;
end
$$;

comment on function payrail.remove_golden_query(text) is
$$Removes the golden query that is the same as p_query (as golden_queries_query_key compares them), with its relevant records; returns its id.

P0002 (no_data_found) when there is none: select payrail.remove_golden_query('charge a card in euros');$$;
