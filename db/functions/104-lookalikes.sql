-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- No record can pose as another: a provider, method or docs host that looks like another
-- record's (payrail._lookalike_key, payrail._host_lookalike_key) but is not the same name or host
-- is refused, naming the record it imitates. A rule across rows, so a trigger (no constraint
-- can read other rows); the words are payrail.rules' and these functions', in psql as in every
-- interface (payrail.check_provider_method).

create or replace function payrail._lookalikes_by_key(
  p_id bigint,
  p_provider_key text, p_provider text,
  p_method_key text, p_method text,
  p_docs_key text, p_docs_host text
)
returns table (field text, other payrail.provider_methods)
language plpgsql
stable
security invoker
set search_path from current
-- One statement, planned once a session (a SQL function's body is planned on every
-- call); each probe reads its field's lookalike index (db/schema/030) from one side of the name
-- as stored, so the records of the same name (a provider's other methods, every record of one
-- docs host) are never read one by one; a name the unique key calls the same (another case, a
-- compatibility form) is read and passed over.
set enable_seqscan = off
as $$
declare
  v_provider_key constant text := p_provider_key;
  v_provider_name constant text := p_provider;
  v_method_key constant text := p_method_key;
  v_method_name constant text := p_method;
  v_docs_key constant text := p_docs_key;
  v_docs_name constant text := p_docs_host;
begin
  return query
    (select 'provider', f.pm from (
         (select pm from payrail.provider_methods as pm
          where payrail._lookalike_key(pm.provider) operator(pg_catalog.=) v_provider_key and pm.provider operator(pg_catalog.<) v_provider_name
            and payrail._normalize_name(pm.provider) operator(pg_catalog.<>) payrail._normalize_name(v_provider_name)
            and (p_id is null or pm.id operator(pg_catalog.<>) p_id)
          limit 1)
         union all
         (select pm from payrail.provider_methods as pm
          where payrail._lookalike_key(pm.provider) operator(pg_catalog.=) v_provider_key and pm.provider operator(pg_catalog.>) v_provider_name
            and payrail._normalize_name(pm.provider) operator(pg_catalog.<>) payrail._normalize_name(v_provider_name)
            and (p_id is null or pm.id operator(pg_catalog.<>) p_id)
          limit 1)
       ) as f where v_provider_key is not null limit 1)
    union all
    (select 'method', f.pm from (
         (select pm from payrail.provider_methods as pm
          where payrail._lookalike_key(pm.method) operator(pg_catalog.=) v_method_key and pm.method operator(pg_catalog.<) v_method_name
            and payrail._normalize_name(pm.method) operator(pg_catalog.<>) payrail._normalize_name(v_method_name)
            and (p_id is null or pm.id operator(pg_catalog.<>) p_id)
          limit 1)
         union all
         (select pm from payrail.provider_methods as pm
          where payrail._lookalike_key(pm.method) operator(pg_catalog.=) v_method_key and pm.method operator(pg_catalog.>) v_method_name
            and payrail._normalize_name(pm.method) operator(pg_catalog.<>) payrail._normalize_name(v_method_name)
            and (p_id is null or pm.id operator(pg_catalog.<>) p_id)
          limit 1)
       ) as f where v_method_key is not null limit 1)
    union all
    (select 'docs_url', f.pm from (
         (select pm from payrail.provider_methods as pm
          where pm.docs_url is not null and payrail._host_lookalike_key(pm.docs_url) operator(pg_catalog.=) v_docs_key and payrail._url_host(pm.docs_url) operator(pg_catalog.<) v_docs_name
            and (p_id is null or pm.id operator(pg_catalog.<>) p_id)
          limit 1)
         union all
         (select pm from payrail.provider_methods as pm
          where pm.docs_url is not null and payrail._host_lookalike_key(pm.docs_url) operator(pg_catalog.=) v_docs_key and payrail._url_host(pm.docs_url) operator(pg_catalog.>) v_docs_name
            and (p_id is null or pm.id operator(pg_catalog.<>) p_id)
          limit 1)
       ) as f where v_docs_key is not null limit 1);
end
$$;

comment on function payrail._lookalikes_by_key(bigint, text, text, text, text, text, text) is
$$payrail._lookalikes for keys already computed: each field's look (NULL: not asked) and its name as stored (for a docs URL, its host).$$;

create or replace function payrail._lookalikes(p_id bigint, p_provider text, p_method text, p_docs_url text)
returns table (field text, other payrail.provider_methods)
language plpgsql
stable
security invoker
set search_path from current
as $$
begin
  return query select * from payrail._lookalikes_by_key(
    p_id, payrail._lookalike_key(p_provider), p_provider, payrail._lookalike_key(p_method), p_method,
    payrail._host_lookalike_key(p_docs_url), payrail._url_host(p_docs_url));
end
$$;

comment on function payrail._lookalikes(bigint, text, text, text) is
$$For each of the provider, method and docs URL given (NULL: not asked), the record other than p_id it looks like without being the same name (as the unique key compares names) or host (payrail._url_host), in that order; a field that imitates nobody gives no row.$$;

create or replace function payrail._written_by_this_transaction(p_id bigint)
returns boolean
language sql
stable
security invoker
set search_path from current
-- A row another transaction has not committed is invisible, so a visible row whose writer is
-- still in progress was written by this one (or one of its savepoints, whose ids come after
-- its own): its id means nothing to a reader once this transaction is rolled back.
return coalesce((
  select pg_catalog.pg_xact_status(((t.top operator(pg_catalog.>>) 32 operator(pg_catalog.<<) 32)
                                    operator(pg_catalog.|) pm.xmin::text::bigint)::text::pg_catalog.xid8)
         operator(pg_catalog.=) 'in progress'
  from payrail.provider_methods as pm
  cross join (select pg_catalog.pg_current_xact_id_if_assigned()::text::bigint as top) as t
  where pm.id operator(pg_catalog.=) p_id
    and pm.xmin::text::bigint operator(pg_catalog.>=) (t.top operator(pg_catalog.%) 4294967296)), false);

comment on function payrail._written_by_this_transaction(bigint) is
$$True when record p_id was written by the current transaction and is not committed yet (a check that is rolled back, an earlier line of the same import).$$;

create or replace function payrail._lookalike_in_words(p_field text, p_value text, p_other payrail.provider_methods)
returns text
language sql
stable
security invoker
set search_path from current
return pg_catalog.format(
  'looks like the %s of %s, "%s / %s"%s, without being the same: they differ only in characters that look alike',
  case when p_field operator(pg_catalog.=) 'docs_url' then 'docs host' else p_field end,
  case when payrail._written_by_this_transaction(p_other.id) then 'another record of this same change (another line of the same file)'
       else 'record ' operator(pg_catalog.||) p_other.id end,
  p_other.provider, p_other.method,
  case when p_field operator(pg_catalog.=) 'docs_url'
       then pg_catalog.format(' (%s, and this one is %s)', payrail._url_host(p_other.docs_url), payrail._url_host(p_value))
       else '' end);

comment on function payrail._lookalike_in_words(text, text, payrail.provider_methods) is
$$How the lookalike rule refuses p_value of p_field, naming the record it imitates: the trigger's message and payrail.check_provider_method's words.$$;

create or replace function payrail._lookalike_constraint(p_field text)
returns text
language sql
immutable strict parallel safe
security invoker
set search_path from current
return pg_catalog.format('provider_methods_%s_lookalike_check', p_field);

comment on function payrail._lookalike_constraint(text) is
$$The name the lookalike rule of a field ('provider', 'method', 'docs_url') goes by in errors and in payrail.rules.$$;

create or replace function payrail.tg_provider_methods__refuse_lookalikes()
returns trigger
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  -- The fields this write sets anew (NULL: unchanged), as stored: after canonicalize_names
  -- (triggers fire in name order).
  v_provider constant text := case when tg_op operator(pg_catalog.=) 'INSERT' or new.provider operator(pg_catalog.<>) old.provider then new.provider end;
  v_method constant text := case when tg_op operator(pg_catalog.=) 'INSERT' or new.method operator(pg_catalog.<>) old.method then new.method end;
  v_docs_url constant text := case when tg_op operator(pg_catalog.=) 'INSERT' or coalesce(new.docs_url operator(pg_catalog.<>) old.docs_url, (new.docs_url is null) operator(pg_catalog.<>) (old.docs_url is null)) then new.docs_url end;
  v_provider_key constant text := payrail._lookalike_key(v_provider);
  v_method_key constant text := payrail._lookalike_key(v_method);
  v_docs_key constant text := payrail._host_lookalike_key(v_docs_url);
  v_found record;
begin
  if v_provider is null and v_method is null and v_docs_url is null then
    return new;
  end if;
  -- Two writers of different names that look alike wait for each other, so the second sees the
  -- first's once it commits: the lock is the look's bucket (one of 128 per field, so a
  -- transaction that writes thousands of records holds at most 3 x 128 locks: a lock per look
  -- filled PostgreSQL's lock table, "out of shared memory"), taken in this fixed order of fields.
  -- A NULL key (the field unchanged) locks nothing: the lock functions are strict.
  perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('payrail lookalike provider'),
                                           pg_catalog.hashtext(v_provider_key) operator(pg_catalog.&) 127),
          pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('payrail lookalike method'),
                                           pg_catalog.hashtext(v_method_key) operator(pg_catalog.&) 127),
          pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('payrail lookalike docs_url'),
                                           pg_catalog.hashtext(v_docs_key) operator(pg_catalog.&) 127);
  select l.field, l.other into v_found
  from payrail._lookalikes_by_key(new.id, v_provider_key, v_provider, v_method_key, v_method, v_docs_key, payrail._url_host(v_docs_url)) as l
  limit 1;
  if v_found.field is not null then
    raise exception using
      errcode = 'check_violation',
      constraint = payrail._lookalike_constraint(v_found.field),
      schema = 'payrail',
      table = 'provider_methods',
      column = v_found.field,
      message = pg_catalog.format('%s "%s" %s', v_found.field,
                                  case when v_found.field operator(pg_catalog.=) 'provider' then v_provider when v_found.field operator(pg_catalog.=) 'method' then v_method else v_docs_url end,
                                  payrail._lookalike_in_words(v_found.field,
                                    case when v_found.field operator(pg_catalog.=) 'provider' then v_provider when v_found.field operator(pg_catalog.=) 'method' then v_method else v_docs_url end,
                                    v_found.other)),
      hint = (select r.remedy from payrail.rules as r where r.constraint_name operator(pg_catalog.=) payrail._lookalike_constraint(v_found.field));
  end if;
  return new;
end
$$;

comment on function payrail.tg_provider_methods__refuse_lookalikes() is
$$Refuses a provider, method or docs host that looks like another record's without being the same (UTS #39 skeletons), naming that record.$$;

create or replace trigger tg_provider_methods__refuse_lookalikes
  before insert or update of provider, method, docs_url on payrail.provider_methods
  for each row execute function payrail.tg_provider_methods__refuse_lookalikes();

create or replace function payrail.find_lookalikes()
returns table (record_id bigint, field text, value text, looks_like_record_id bigint, looks_like text)
language sql
stable
security invoker
set search_path from current
-- Every record compared, once: for registries that held look-alikes before the rule (db/upgrades/007).
as $$
  select pm.id, l.field, v.value, (l.other).id, payrail._lookalike_in_words(l.field, v.value, l.other)
  from payrail.provider_methods as pm
  cross join lateral payrail._lookalikes(pm.id, pm.provider, pm.method, pm.docs_url) as l
  cross join lateral (select case when l.field operator(pg_catalog.=) 'provider' then pm.provider when l.field operator(pg_catalog.=) 'method' then pm.method else pm.docs_url end) as v(value)
  order by pm.id, l.field
$$;

comment on function payrail.find_lookalikes() is
$$Every stored record whose provider, method or docs host looks like another record's, with the record it looks like, in words.

The lookalike rule refuses such a write from the moment it is in force; a registry that held
look-alikes before (db/upgrades/007-lookalikes) lists them here to rename or delete.$$;
