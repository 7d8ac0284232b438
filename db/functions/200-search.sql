-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail._session_login_limits()
returns text[]
language sql
-- Immutable, though it reads the catalog: PostgreSQL computes a call of an immutable function
-- without arguments when it plans it, so a plan of search's check, made once per session and
-- kept, holds this session's login and its limits, and a search reads no catalog for them (a
-- lookup per search cost 10% to 25% of a name-path search: docs/benchmarks.md). They are fixed
-- for the session: PostgreSQL applies a login's settings when it connects, and a bound changed in
-- payrail.agent_logins counts from the login's next session too. Only the check calls it, and it
-- compares the login.
immutable
security invoker
set search_path = pg_catalog, pg_temp
as $$
  select array[session_user::text] || payrail._login_limits_of(session_user)
$$;

comment on function payrail._session_login_limits() is
$$This session's login, then the limits it is given (payrail._login_limits_of), computed once per session by the plans that call it.$$;

create or replace function payrail._refuse_lifted_limits()
returns void
language plpgsql
stable
security invoker
set search_path = pg_catalog, pg_temp
as $$
declare
  -- The login, where its limits are kept, then each setting and the value it is given
  -- (payrail._login_limits_of).
  v_limits text[] := payrail._session_login_limits();
  v_now text;
begin
  -- Another login since the plan was made (SET SESSION AUTHORIZATION, a superuser's): its own.
  if v_limits[1] <> session_user then
    v_limits := array[session_user::text] || payrail._login_limits_of(session_user);
  end if;
  -- Nearly always: each at its login's value, or not given.
  if (v_limits[4] is null or current_setting(v_limits[3]) = v_limits[4])
     and (v_limits[6] is null or current_setting(v_limits[5]) = v_limits[6])
     and (v_limits[8] is null or current_setting(v_limits[7]) = v_limits[8]) then
    return;
  end if;
  -- Any session may SET them (SET, SET LOCAL, PGOPTIONS or options at connect), and a login may
  -- give itself others (ALTER ROLE): search refuses a session whose value now is off (0) or above
  -- its login's, in milliseconds (2000 = 2s).
  for i in 3 .. 7 by 2 loop
    v_now := current_setting(v_limits[i]);
    if payrail._milliseconds(v_limits[i + 1]) > 0
       and (payrail._milliseconds(v_now) = 0 or payrail._milliseconds(v_now) > payrail._milliseconds(v_limits[i + 1])) then
      raise exception using
        errcode = 'PYS01',
        message = format('%s is %s in this session, but login %I is given %s: a session may not lift the limits of its login',
                         v_limits[i], case when v_now = '0' then '0 (off)' else v_now end, session_user, v_limits[i + 1]),
        hint = case v_limits[2]
          when 'registry' then format(
            'Search with %s at most %s ("set %s = %L"): the registry keeps the bounds `payrail-embedder agent add` gave '
            'the login (payrail.agent_logins), whatever the login''s own settings say; the registry''s owner changes '
            'them with agent add.', v_limits[i], v_limits[i + 1], v_limits[i], v_limits[i + 1])
          else format(
            'Leave %s to the login''s setting or lower it ("reset %s"); the DBA raises the login''s limit with '
            '"alter role %I set %s = ...".', v_limits[i], v_limits[i], session_user, v_limits[i]) end;
    end if;
  end loop;
end
$$;

comment on function payrail._refuse_lifted_limits() is
$$Raises PYS01 when this session runs with statement_timeout, lock_timeout or idle_in_transaction_session_timeout off or above what its login is given: the bounds `agent add` gave it (payrail.agent_logins), else its settings (ALTER ROLE login [IN DATABASE db] SET ...).

Search's first step: an agent cannot lift its bounds by setting them itself, in its session or
on its login (docs/security.md).$$;

create or replace function payrail._check_query(p_query text)
returns void
language plpgsql
immutable
security invoker
set search_path from current
as $$
begin
  -- Unicode white space and invisible characters, the same in every locale.
  if p_query is null or payrail._is_blank(p_query) then
    raise exception using
      errcode = 'invalid_parameter_value',
      message = 'query is empty',
      hint = 'Describe in plain words what you need, e.g. ''find live hotel availability through a paid API''.';
  end if;
  if pg_catalog.char_length(p_query) operator(pg_catalog.>) 2000 then
    raise exception using
      errcode = 'invalid_parameter_value',
      message = pg_catalog.format('query is %s characters long; the limit is 2,000', pg_catalog.char_length(p_query)),
      hint = 'Shorten the query to the need itself.';
  end if;
end
$$;

comment on function payrail._check_query(text) is
$$Raises invalid_parameter_value (22023) for an empty (nothing but white space or invisible characters) or over-long (> 2,000 characters) query.$$;

create or replace function payrail._name_path_matches(p_query text, p_counted_draft_id bigint default null)
returns setof payrail.provider_methods
language sql
stable
security invoker
set search_path from current
-- One plan, kept: the query's text changes no plan, and planning it anew for every query
-- (PostgreSQL's first five) cost 0.3 ms a call of query_takes_name_path at 1,000 records.
set plan_cache_mode = force_generic_plan
-- That one plan is made from whatever statistics exist when a session first asks, none right
-- after a load or a restore; no estimate may then turn a lookup into a scan that normalizes
-- every stored name (1 s a question at 10,000 records). Each lookup has its own index.
set enable_seqscan = off
-- A few rows: starting workers would cost more than the lookups (14 ms against 0.13 at 100,000
-- records, where the planner's guess of 268 rows a lookup planned a parallel append).
set max_parallel_workers_per_gather = 0
as $$
  -- One lookup per way of naming a record, each through its own index of enabled records (an OR
  -- of the four is a scan when the planner misjudges it); the counted draft by its id alone.
  -- Exact pair first, then provider, then method; within each, by normalized provider and method.
  select (m.pm).*
  from (
    select distinct on ((found.pm).id) found.pm, found.rank
    from (select payrail._normalize_name(p_query)) as q(name),
    lateral (
      select p, 1 from payrail.provider_methods as p
      where p.enabled and payrail._normalize_name(p.provider operator(pg_catalog.||) ' ' operator(pg_catalog.||) p.method) operator(pg_catalog.=) q.name
      union all
      select p, 1 from payrail.provider_methods as p
      where p.enabled and payrail._normalize_name(p.provider operator(pg_catalog.||) ' / ' operator(pg_catalog.||) p.method) operator(pg_catalog.=) q.name
      union all
      select p, 2 from payrail.provider_methods as p
      where p.enabled and payrail._normalize_name(p.provider) operator(pg_catalog.=) q.name
      union all
      select p, 3 from payrail.provider_methods as p
      where p.enabled and payrail._normalize_name(p.method) operator(pg_catalog.=) q.name
      union all
      select p, case
                  when q.name operator(pg_catalog.=) any (array[
                         payrail._normalize_name(p.provider operator(pg_catalog.||) ' ' operator(pg_catalog.||) p.method),
                         payrail._normalize_name(p.provider operator(pg_catalog.||) ' / ' operator(pg_catalog.||) p.method)]) then 1
                  when payrail._normalize_name(p.provider) operator(pg_catalog.=) q.name then 2
                  else 3
                end
      from payrail.provider_methods as p
      where p.id operator(pg_catalog.=) p_counted_draft_id and not p.enabled
        and q.name operator(pg_catalog.=) any (array[
              payrail._normalize_name(p.provider), payrail._normalize_name(p.method),
              payrail._normalize_name(p.provider operator(pg_catalog.||) ' ' operator(pg_catalog.||) p.method),
              payrail._normalize_name(p.provider operator(pg_catalog.||) ' / ' operator(pg_catalog.||) p.method)])
    ) as found(pm, rank)
    -- A record found more than one way counts once, by its best way.
    order by (found.pm).id, found.rank
  ) as m
  order by m.rank, payrail._normalize_name((m.pm).provider), payrail._normalize_name((m.pm).method)
$$;

comment on function payrail._name_path_matches(text, bigint) is
$$The name path: enabled records whose provider, method, or provider-and-method pair equals the query.

p_counted_draft_id, when given, counts that record as enabled (payrail.preview_search).

Names compare normalized (payrail._normalize_name). A pair is written "provider method" or
"provider / method". Order: pair matches, then provider matches, then method matches; ties by
normalized provider, then normalized method. Every match, in that order: search returns the first
3, and a golden query's wanted record further down has its place in it as its rank (db/SEARCH.md).$$;

create or replace function payrail.query_takes_name_path(query text)
returns boolean
language plpgsql
stable
security definer
set search_path from current
as $$
begin
  perform payrail._refuse_lifted_limits();
  perform payrail._check_query(query);
  return exists (select from payrail._name_path_matches(query));
end
$$;

comment on function payrail.query_takes_name_path(text) is
$$True when search_provider_methods answers this query by name alone, without a query embedding.

Lets a caller skip the embedding service for exact provider or method names. Raises
invalid_parameter_value (22023) for an empty or over-long query, PYS01 when the session lifted a
limit its login is given.$$;

create or replace function payrail._half_precision_error_bound(p_dimensions integer)
returns double precision
language sql
immutable
security invoker
-- Arithmetic of built-ins alone, on a path of pg_catalog alone: operator(pg_catalog.*) would take
-- the precedence of any other operator, so every product needed parentheses (db/CONVENTIONS.md).
set search_path = pg_catalog, pg_temp
as $$
  -- With n = dimensions, u = 2^-24 (float32 rounding), gamma = n u / (1 - n u) (a float32 sum
  -- of n products), rho = 2^-11 + 2^-23 (rounding a unit vector's component to float32, then to
  -- half precision) and tau = 2^-25 (half precision's absolute error below its normal range),
  -- for unit vectors a, b of cosine c:
  --   pgvector's cosine distance is 1 - c within 3 gamma (three float32 sums);
  --   the inner product of the half-precision a', b' is c within
  --   rho (2 + rho) + 2 tau sqrt(n) (1 + rho) + n tau^2 (rounding: sum |a_i b_i| <= 1 and
  --   sum |a_i| <= sqrt(n)), plus gamma (1 + rho + tau sqrt(n))^2 for its float32 sum.
  -- The sum of the two: 0.00135 at 1,536 dimensions, 0.00107 at 384 (db/SEARCH.md).
  select 3 * g + rho * (2 + rho) + 2 * tau * sqrt(n) * (1 + rho) + n * tau ^ 2 + g * (1 + rho + tau * sqrt(n)) ^ 2
  from (select p_dimensions::double precision, 2.0 ^ -11 + 2.0 ^ -23, 2.0 ^ -25) as c(n, rho, tau),
       lateral (select n * 2.0 ^ -24 / (1 - n * 2.0 ^ -24)) as s(g)
$$;

comment on function payrail._half_precision_error_bound(integer) is
$$How far 1 - the inner product of two unit vectors in half precision (1 + halfvec's <#>, the
negative inner product) can be from pgvector's exact cosine distance (vector <=>) of the
originals, at this many dimensions.

payrail._search re-ranks by exact distance every record whose first-pass distance is within twice
this bound of the 3rd nearest, so no record that belongs in the top 3 can be missed.$$;

create or replace function payrail._first_pass(
  p_query_embedding vector,
  p_counted_draft_id bigint,
  p_half_precision boolean,
  p_scan_limit integer,
  p_max_distance double precision
)
returns table (id bigint, distance double precision)
-- PL/pgSQL for RETURN QUERY, which runs its query to the end and so may start parallel workers.
-- PostgreSQL runs a statement asked for a limited number of rows without workers: the SELECT
-- INTO of payrail._search (it asks for one row) would never launch any, and a language sql
-- function without SET clauses would be inlined into it. See db/SEARCH.md, "One search, every core".
language plpgsql
stable
-- Unsafe: called inside a parallel worker it could not start workers of its own.
parallel unsafe
security invoker
set search_path from current
-- One plan per statement, kept: nothing in the arguments changes it.
set plan_cache_mode = force_generic_plan
-- pgvector prices a distance like an integer comparison, so under the default costs the planner's
-- choice of workers hangs on its estimate of the sort, not of the scan. Priced at nothing, workers
-- are planned whenever the scanned table holds at least min_parallel_table_scan_size: 96MB, about
-- 24,000 records at 1,536 dimensions; below it starting them costs more than they save. Workers
-- only pay off on idle cores (db/SEARCH.md, "Measured"). How many grows with the table's size, up
-- to the server's max_parallel_workers_per_gather (0 turns them off).
set parallel_setup_cost = 0
set parallel_tuple_cost = 0
set min_parallel_table_scan_size = '96MB'
-- JIT would compile the scan anew on every search, in every worker (above jit_above_cost: about
-- 200,000 records of 1,536 dimensions) and cannot speed up the distance, computed by pgvector in C.
set jit = off
as $$
begin
  -- Without p_max_distance, the test costs one comparison with NULL per row.
  if p_half_precision then
    -- 1 + the negative inner product of unit vectors in half precision; the 1 is left out, a shift
    -- that changes no comparison. The scalar subquery runs once per search, not once per row.
    return query
      select n.id, n.distance
      from (
        select hv.provider_method_id, hv.unit_embedding <#> (select l2_normalize(p_query_embedding)::halfvec)
        from payrail.provider_method_half_vectors as hv
      ) as n(id, distance)
      where p_max_distance is null or n.distance operator(pg_catalog.<=) p_max_distance
      order by n.distance
      limit p_scan_limit;
    -- The draft comes as one more row, for the caller to sort in: PostgreSQL 16 plans no parallel
    -- scan of a UNION ALL of the two tables (each branch computes the query's vector apart).
    if p_counted_draft_id is not null then
      return query
        select pm.id, l2_normalize(pm.embedding)::halfvec <#> (select l2_normalize(p_query_embedding)::halfvec)
        from payrail.provider_methods as pm
        where pm.id operator(pg_catalog.=) p_counted_draft_id and not pm.enabled;
    end if;
  else
    return query
      select n.id, n.distance
      from (
        select pm.id, pm.embedding <=> p_query_embedding
        from payrail.provider_methods as pm
        where pm.enabled or pm.id operator(pg_catalog.=) p_counted_draft_id
      ) as n(id, distance)
      where p_max_distance is null or n.distance operator(pg_catalog.<=) p_max_distance
      order by n.distance
      limit p_scan_limit;
  end if;
end
$$;

comment on function payrail._first_pass(vector, bigint, boolean, integer, double precision) is
$$Search's first pass: the p_scan_limit records nearest to the query (NULL: no limit) among those
within p_max_distance of it (NULL: all), by a distance within the error bound of the exact one.

Enabled records, plus the record p_counted_draft_id (NULL: none) counted as enabled; over the
half-precision table the draft comes in addition to the p_scan_limit rows, so callers sort. With
p_half_precision, over payrail.provider_method_half_vectors by the negative inner product, which
plus 1 is within payrail._half_precision_error_bound of the exact distance; without (pgvector
before 0.7), over the exact vectors by cosine distance (error 0). Runs with parallel workers on
tables of at least min_parallel_table_scan_size (set on this function): db/SEARCH.md, "One
search, every core".$$;

create or replace function payrail._search(
  p_query text,
  p_query_embedding vector,
  p_query_embedding_model text,
  p_counted_draft_id bigint
)
returns table (provider text, method text, urls text[], docs_url text, guidance text)
language plpgsql
stable
security invoker
set search_path from current
-- One plan per statement, kept: a custom plan would be remade on every call (0.1 ms, 20% of a
-- search at 1,000 records), since no parameter changes the plan.
set plan_cache_mode = force_generic_plan
as $$
declare
  v_model payrail.embedding_model;
  v_half_precision boolean;
  v_error_bound double precision;
  -- Enough for the 3 nearest and every record the first pass could have misplaced, unless the
  -- registry holds near-copies; then the scan repeats without a limit.
  v_scan_limit integer := 64;
  v_nearest_ids bigint[];
  v_nearest_distances double precision[];
  v_cutoff double precision;
begin
  perform payrail._refuse_lifted_limits();
  perform payrail._check_query(p_query);

  -- The first 3 of the name path's order.
  return query
    select m.provider, m.method, m.urls, m.docs_url, m.guidance
    from rows from (payrail._name_path_matches(p_query, p_counted_draft_id)) with ordinality as m
    order by m.ordinality
    limit 3;
  if found then
    return;
  end if;

  select * into v_model from payrail.embedding_model;
  if p_query_embedding is null then
    -- The detail names the model, so a client learns what to embed with from this one answer
    -- (payrail_embedder.registry.embedding_model reads it).
    raise exception using
      errcode = 'PYE01',
      message = 'this query is not a provider or method name, so it needs a query embedding',
      detail = case when v_model.name is null then 'The registry has no embedding model yet.'
                    else pg_catalog.format('The registry''s embedding model is %s (%s dimensions).', v_model.name, v_model.dimensions) end,
      hint = 'Embed the query with the model payrail.get_embedding_model() returns and pass it as query_embedding.';
  end if;

  if vector_norm(p_query_embedding) operator(pg_catalog.=) 0 then
    raise exception using
      errcode = 'invalid_parameter_value',
      message = 'query embedding is the zero vector, which has no cosine distance',
      hint = 'Pass the embedding the model returned for the query text.';
  end if;
  if v_model.name is null then
    -- No model yet means no vectors, so no enabled record: the honest answer is none.
    return;
  end if;
  if (p_query_embedding_model is not null and p_query_embedding_model operator(pg_catalog.<>) v_model.name)
     or vector_dims(p_query_embedding) operator(pg_catalog.<>) v_model.dimensions then
    raise exception using
      errcode = 'PYE02',
      message = pg_catalog.format(
        'query embedding is from model %s (%s dimensions), but the registry uses %s (%s dimensions)',
        coalesce(p_query_embedding_model, 'unnamed'), vector_dims(p_query_embedding), v_model.name, v_model.dimensions),
      hint = 'Embed the query with the model payrail.get_embedding_model() returns.';
  end if;
  -- Its direction alone ranks: scaled to unit length in double precision, a query of any length
  -- ranks the same, where pgvector's float32 sums would overflow or vanish at extreme lengths.
  p_query_embedding := l2_normalize(p_query_embedding);

  -- Exact cosine distance over every enabled record (no index, by design); the unique
  -- normalized name breaks ties so equal distances always come back in the same order.
  -- First pass: a distance within v_error_bound of the exact one, sorted alone (normalizing
  -- every row's names would make search about 3x slower), keeping the nearest v_scan_limit.
  -- A record whose exact distance is at most the 3rd smallest is within 2 * v_error_bound of the
  -- 3rd smallest first-pass distance, so every such record is kept unless the kept ones all are
  -- that near; then the first pass runs again for every record that near. Proof: db/SEARCH.md.
  -- pgvector 0.7 and later (db/schema/035): the first pass reads half-precision unit vectors.
  -- Looked up here, not for name-path queries, which never need it.
  v_half_precision := pg_catalog.to_regclass('payrail.provider_method_half_vectors') is not null;
  v_error_bound := case when v_half_precision then payrail._half_precision_error_bound(v_model.dimensions) else 0 end;
  loop
    select pg_catalog.array_agg(n.id order by n.distance), pg_catalog.array_agg(n.distance order by n.distance)
      into v_nearest_ids, v_nearest_distances
    from payrail._first_pass(p_query_embedding, p_counted_draft_id, v_half_precision, v_scan_limit, v_cutoff) as n;
    v_cutoff := v_nearest_distances[3] operator(pg_catalog.+) (2 operator(pg_catalog.*) v_error_bound);
    exit when v_scan_limit is null
      or coalesce(pg_catalog.cardinality(v_nearest_distances), 0) operator(pg_catalog.<) v_scan_limit
      or v_nearest_distances[v_scan_limit] operator(pg_catalog.>) v_cutoff;
    v_scan_limit := null;
  end loop;

  -- Second pass: the exact order of the records the first pass could not tell apart, each found
  -- by its id. "offset 0" keeps the lookup a subquery run once per id: a join would let a plan
  -- made without statistics (right after a load) hash the whole table instead.
  return query
    select pm.provider, pm.method, pm.urls, pm.docs_url, pm.guidance
    from rows from (pg_catalog.unnest(v_nearest_ids), pg_catalog.unnest(v_nearest_distances)) as n(id, distance),
    lateral (select p.* from payrail.provider_methods as p where p.id operator(pg_catalog.=) n.id offset 0) as pm
    where v_cutoff is null or n.distance operator(pg_catalog.<=) v_cutoff
    order by pm.embedding <=> p_query_embedding, payrail._normalize_name(pm.provider), payrail._normalize_name(pm.method)
    limit 3;
end
$$;

comment on function payrail._search(text, vector, text, bigint) is
$$Both search paths, for payrail.search_provider_methods and payrail.preview_search: one order.

Enabled records, plus the record p_counted_draft_id (NULL: none) counted as enabled. See
search_provider_methods for the paths, the order and the errors.$$;

create or replace function payrail.search_provider_methods(
  query text,
  query_embedding vector default null,
  query_embedding_model text default null
)
returns table (provider text, method text, urls text[], docs_url text, guidance text)
language sql
stable
security definer
set search_path from current
as $$
  select * from payrail._search(query, query_embedding, query_embedding_model, null)
$$;

comment on function payrail.search_provider_methods(text, vector, text) is
$$Finds at most 3 enabled provider methods for an agent's question; no scores.

Name path: when the normalized query equals a provider, a method, or "provider method" /
"provider / method", the matching records come back (see payrail._name_path_matches for the
order) and query_embedding is not needed. Otherwise the semantic path orders every enabled
record by exact cosine distance to query_embedding scaled to unit length (in double precision:
its scale never changes the ranking), ties by normalized provider and method.

Errors (db/ERRCODES.md): 22023 empty or over-long query, or zero vector; PYE01 the query needs
an embedding; PYE02 the embedding is not from the registry's model (name or dimensions); PYS01
the session lifted a limit its login is given (statement_timeout, lock_timeout,
idle_in_transaction_session_timeout).$$;
