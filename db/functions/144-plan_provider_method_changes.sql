-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail.plan_provider_method_changes(
  p_ids bigint[],
  p_providers text[],
  p_methods text[],
  p_guidances text[],
  p_enabled boolean[],
  p_expected_versions integer[]
)
returns table (
  record_id bigint,
  record_version integer,
  provider text,
  method text,
  provider_key text,
  method_key text,
  needs_embedding boolean,
  conflict text
)
language sql
stable
security invoker
set search_path from current
-- Every read is a lookup by a key (below): by its index, whatever the statistics say.
set enable_seqscan = off
as $$
  with c as (
    select c.*, payrail._canonical_name(c.provider) as stored_provider, payrail._canonical_name(c.method) as stored_method,
           payrail._normalize_name(c.provider) as provider_key, payrail._normalize_name(c.method) as method_key
    -- What unnest(p_ids, p_providers, ...) in FROM stands for, with unnest named by its schema.
    from rows from (pg_catalog.unnest(p_ids), pg_catalog.unnest(p_providers), pg_catalog.unnest(p_methods),
                    pg_catalog.unnest(p_guidances), pg_catalog.unnest(p_enabled), pg_catalog.unnest(p_expected_versions))
           with ordinality as c(id, provider, method, guidance, enabled, expected_version, position)
  )
  select (found.p).id, (found.p).version, c.stored_provider, c.stored_method, c.provider_key, c.method_key,
         -- Content that changes is embedded; so is a record that will be enabled without a current vector.
         (found.p).id is null
           or (found.p).content_hash operator(pg_catalog.<>) payrail._content_hash(c.stored_provider, c.stored_method, c.guidance)
           or (coalesce(c.enabled, (found.p).enabled) and not vector_state.has_current_vector),
         -- 0 (must be new) is the unique key's business: payrail.save_provider_method says so.
         payrail._edit_conflict(c.id, found.p, case when c.expected_version operator(pg_catalog.<>) 0 then c.expected_version end)
  from c
  -- By id, or by name through the unique key's index, once per change, and the vector state by
  -- id: no join is left for a plan made without statistics (a bulk load's) to turn into a scan
  -- of the table, or of every name normalized.
  left join lateral (
    select p from payrail.provider_methods as p where p.id operator(pg_catalog.=) c.id
    union all
    select p from payrail.provider_methods as p
    where c.id is null
      and payrail._normalize_name(p.provider) operator(pg_catalog.=) c.provider_key
      and payrail._normalize_name(p.method) operator(pg_catalog.=) c.method_key
  ) as found on true
  left join lateral (
    select s.has_current_vector from payrail.provider_method_states as s where s.id operator(pg_catalog.=) (found.p).id offset 0
  ) as vector_state on true
  order by c.position
$$;

comment on function payrail.plan_provider_method_changes(bigint[], text[], text[], text[], boolean[], integer[]) is
$$What saving these changes would do, one row per change in the order given; reads only, writes nothing.

The write path's first step (import, `payrail-embedder edit`, the backoffice), before it embeds
anything. Change n is p_ids[n] (NULL: the record of that provider and method, as the unique key
compares names, or a new one), the names and guidance it would save, p_enabled[n] (NULL: keep)
and the version the caller read (NULL: none; 0: must be new). Each row names the record found
(NULL: a new one) and its version, the names as they would be stored and their unique-key form,
whether the save needs a vector (new or changed content, or enabled without a current vector),
and the edit conflict payrail.save_provider_method would raise (PYE03), in words, or NULL.$$;
