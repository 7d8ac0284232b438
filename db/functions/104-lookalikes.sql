-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- No record can pose as another: a provider, method or docs host that looks like another
-- record's (payrail._lookalike_key, payrail._host_lookalike_key) but is not the same name or host
-- is refused, naming the record it imitates. A rule across rows, so a trigger (no constraint
-- can read other rows); the words are payrail.rules' and these functions', in psql as in every
-- interface (payrail.check_provider_method).

create or replace function payrail._lookalike_with(p_field text, p_key text, p_name text, p_id bigint)
returns payrail.provider_methods
language plpgsql
stable
security invoker
set search_path from current
-- Each lookup reads the field's lookalike index (db/schema/030) from both sides of the name as
-- stored, so the records of the same name (a provider's other methods, every record of one docs
-- host) are never read one by one; a name that differs only as the unique key ignores (case,
-- compatibility forms) is the same name, read and passed over.
set enable_seqscan = off
as $$
declare
  v_other payrail.provider_methods;
begin
  if p_field operator(pg_catalog.=) 'docs_url' then
    select * into v_other from (
      (select * from payrail.provider_methods as pm
       where pm.docs_url is not null and payrail._host_lookalike_key(pm.docs_url) operator(pg_catalog.=) p_key
         and payrail._url_host(pm.docs_url) operator(pg_catalog.<) p_name and pm.id is distinct from p_id
       limit 1)
      union all
      (select * from payrail.provider_methods as pm
       where pm.docs_url is not null and payrail._host_lookalike_key(pm.docs_url) operator(pg_catalog.=) p_key
         and payrail._url_host(pm.docs_url) operator(pg_catalog.>) p_name and pm.id is distinct from p_id
       limit 1)) as found
    limit 1;
  elsif p_field operator(pg_catalog.=) 'provider' then
    select * into v_other from (
      (select * from payrail.provider_methods as pm
       where payrail._lookalike_key(pm.provider) operator(pg_catalog.=) p_key and pm.provider operator(pg_catalog.<) p_name
         and payrail._normalize_name(pm.provider) operator(pg_catalog.<>) payrail._normalize_name(p_name) and pm.id is distinct from p_id
       limit 1)
      union all
      (select * from payrail.provider_methods as pm
       where payrail._lookalike_key(pm.provider) operator(pg_catalog.=) p_key and pm.provider operator(pg_catalog.>) p_name
         and payrail._normalize_name(pm.provider) operator(pg_catalog.<>) payrail._normalize_name(p_name) and pm.id is distinct from p_id
       limit 1)) as found
    limit 1;
  else
    select * into v_other from (
      (select * from payrail.provider_methods as pm
       where payrail._lookalike_key(pm.method) operator(pg_catalog.=) p_key and pm.method operator(pg_catalog.<) p_name
         and payrail._normalize_name(pm.method) operator(pg_catalog.<>) payrail._normalize_name(p_name) and pm.id is distinct from p_id
       limit 1)
      union all
      (select * from payrail.provider_methods as pm
       where payrail._lookalike_key(pm.method) operator(pg_catalog.=) p_key and pm.method operator(pg_catalog.>) p_name
         and payrail._normalize_name(pm.method) operator(pg_catalog.<>) payrail._normalize_name(p_name) and pm.id is distinct from p_id
       limit 1)) as found
    limit 1;
  end if;
  return v_other;
end
$$;

comment on function payrail._lookalike_with(text, text, text, bigint) is
$$The record (other than p_id) whose p_field ('provider', 'method' or 'docs_url') has the look p_key (payrail._lookalike_key, payrail._host_lookalike_key) under another name than p_name (as the unique key compares names) or another host (payrail._url_host); all NULL when there is none.$$;

create or replace function payrail._lookalike_key_of(p_field text, p_value text)
returns text[]
language sql
immutable strict parallel safe
security invoker
set search_path from current
-- [look, name]: what the lookalike rule compares a field's value by.
return case when p_field operator(pg_catalog.=) 'docs_url'
            then array[payrail._host_lookalike_key(p_value), payrail._url_host(p_value)]
            else array[payrail._lookalike_key(p_value), p_value] end;

comment on function payrail._lookalike_key_of(text, text) is
$$What the lookalike rule compares a value of p_field by: its look and the name itself (for a docs URL, its host's look and the host).$$;

create or replace function payrail._lookalike_of(p_field text, p_value text, p_id bigint)
returns payrail.provider_methods
language sql
stable
security invoker
set search_path from current
return (select payrail._lookalike_with(p_field, k.key[1], k.key[2], p_id)
        from (select payrail._lookalike_key_of(p_field, p_value) as key) as k);

comment on function payrail._lookalike_of(text, text, bigint) is
$$The record (other than p_id) whose p_field ('provider', 'method' or 'docs_url') looks like p_value but is another name or host; all NULL when there is none.$$;

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
  v_field text;
  v_value text;
  v_old_value text;
  v_key text[];
  v_other payrail.provider_methods;
begin
  -- After canonicalize_names (triggers fire in name order): the names as they are stored.
  foreach v_field in array array['provider', 'method', 'docs_url'] loop
    v_value := case v_field when 'provider' then new.provider when 'method' then new.method else new.docs_url end;
    v_old_value := case when tg_op operator(pg_catalog.=) 'UPDATE' then
                     case v_field when 'provider' then old.provider when 'method' then old.method else old.docs_url end end;
    continue when v_value is null or v_value is not distinct from v_old_value;
    -- Two writers of different names that look alike wait for each other, so the second sees
    -- the first's once it commits: the lock is the look's, taken in this fixed order of fields.
    v_key := payrail._lookalike_key_of(v_field, v_value);
    perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(
      'payrail lookalike ' operator(pg_catalog.||) v_field operator(pg_catalog.||) ' ' operator(pg_catalog.||) coalesce(v_key[1], ''), 0));
    v_other := payrail._lookalike_with(v_field, v_key[1], v_key[2], new.id);
    if v_other.id is not null then
      raise exception using
        errcode = 'check_violation',
        constraint = payrail._lookalike_constraint(v_field),
        schema = 'payrail',
        table = 'provider_methods',
        column = v_field,
        message = pg_catalog.format('%s "%s" %s', v_field, v_value, payrail._lookalike_in_words(v_field, v_value, v_other)),
        hint = (select r.remedy from payrail.rules as r where r.constraint_name operator(pg_catalog.=) payrail._lookalike_constraint(v_field));
    end if;
  end loop;
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
  select pm.id, f.field, f.value, (f.other).id, payrail._lookalike_in_words(f.field, f.value, f.other)
  from payrail.provider_methods as pm
  cross join lateral (values ('provider', pm.provider), ('method', pm.method), ('docs_url', pm.docs_url)) as v(field, value)
  cross join lateral (select v.field, v.value, payrail._lookalike_of(v.field, v.value, pm.id) as other) as f
  where v.value is not null and (f.other).id is not null
  order by pm.id, f.field
$$;

comment on function payrail.find_lookalikes() is
$$Every stored record whose provider, method or docs host looks like another record's, with the record it looks like, in words.

The lookalike rule refuses such a write from the moment it is in force; a registry that held
look-alikes before (db/upgrades/007-lookalikes) lists them here to rename or delete.$$;
