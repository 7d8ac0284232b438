-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail._embedding_text(p_provider text, p_method text, p_guidance text)
returns text
language sql
immutable strict parallel safe
security invoker
set search_path from current
-- payrail_embedder.embedders.record_text says the same (tests/test_text_rules.py compares them).
return p_provider operator(pg_catalog.||) ': ' operator(pg_catalog.||) p_method operator(pg_catalog.||) E'\n' operator(pg_catalog.||) p_guidance;

comment on function payrail._embedding_text(text, text, text) is
$$The text a record's vector is made from: its provider, method (as stored) and guidance, exactly the content its content hash covers.$$;

create or replace function payrail.provider_method_changes(p_changes jsonb, p_embeddings vector[] default null)
returns payrail.provider_method_change[]
language plpgsql
stable
security invoker
set search_path from current
as $$
declare
  v_unknown text;
begin
  if p_changes is null then
    return null;
  end if;
  if pg_catalog.jsonb_typeof(p_changes) operator(pg_catalog.<>) 'array' then
    raise exception using
      errcode = 'invalid_parameter_value',
      message = pg_catalog.format('the changes are a JSON %s, not an array', pg_catalog.jsonb_typeof(p_changes)),
      hint = 'Pass a JSON array of objects, one a change: [{"provider": "...", "method": "...", "guidance": "..."}].';
  end if;
  -- A key the type has no attribute for would be dropped silently: a typo must not lose a field.
  select pg_catalog.format('change %s: %s', e.n, case when pg_catalog.jsonb_typeof(e.v) operator(pg_catalog.=) 'object'
                                                     then pg_catalog.format('no field is called %s', pg_catalog.to_json(k.key))
                                                     else pg_catalog.format('a JSON %s, not an object', pg_catalog.jsonb_typeof(e.v)) end)
    into v_unknown
  from pg_catalog.jsonb_array_elements(p_changes) with ordinality as e(v, n)
  left join lateral pg_catalog.jsonb_object_keys(case when pg_catalog.jsonb_typeof(e.v) operator(pg_catalog.=) 'object' then e.v end) as k(key) on true
  where pg_catalog.jsonb_typeof(e.v) operator(pg_catalog.<>) 'object'
     or not k.key operator(pg_catalog.=) any (
          select a.attname::text from pg_catalog.pg_attribute as a
          where a.attrelid operator(pg_catalog.=) (select t.typrelid from pg_catalog.pg_type as t
                                                   where t.oid operator(pg_catalog.=) 'payrail.provider_method_change'::pg_catalog.regtype)
            and a.attnum operator(pg_catalog.>) 0 and not a.attisdropped)
  order by e.n
  limit 1;
  if v_unknown is not null then
    raise exception using
      errcode = 'invalid_parameter_value',
      message = v_unknown,
      hint = 'Write each change as an object of record_id, expected_version, provider, method, urls, docs_url, guidance, '
             'enabled, mixed_scripts, embedding, embedding_model and embedding_content_hash (\d payrail.provider_method_change).';
  end if;
  if p_embeddings is not null and pg_catalog.cardinality(p_embeddings) operator(pg_catalog.<>) pg_catalog.jsonb_array_length(p_changes) then
    raise exception using
      errcode = 'invalid_parameter_value',
      message = pg_catalog.format('%s embeddings for %s changes', pg_catalog.cardinality(p_embeddings), pg_catalog.jsonb_array_length(p_changes)),
      hint = 'Pass one embedding a change, NULL for a change without one.';
  end if;
  return (
    select coalesce(pg_catalog.array_agg(
             row(c.record_id, c.expected_version, c.provider, c.method, c.urls, c.docs_url, c.guidance, c.enabled, c.mixed_scripts,
                 coalesce(p_embeddings[c.n::integer], c.embedding), c.embedding_model, c.embedding_content_hash)::payrail.provider_method_change
             order by c.n), '{}')
    from pg_catalog.jsonb_populate_recordset(null::payrail.provider_method_change, p_changes) with ordinality
      as c(record_id, expected_version, provider, method, urls, docs_url, guidance, enabled, mixed_scripts,
           embedding, embedding_model, embedding_content_hash, n));
end
$$;

comment on function payrail.provider_method_changes(jsonb, vector[]) is
$$The changes for payrail.save_provider_methods, from a JSON array of objects keyed as payrail.provider_method_change's attributes (a missing key is NULL).

p_embeddings, when given, is each change's vector by position (NULL for none), for a client that
sends vectors in binary beside the JSON; a vector may also be given in the JSON, as an array of
numbers. An unknown key, or an element that is no object, is refused (22023), naming it:
select * from payrail.save_provider_methods(payrail.provider_method_changes(
  '[{"provider": "Acme Maps", "method": "Geocode", "guidance": "Purpose: turn an address into coordinates."}]'),
  p_embed_drafts => false);$$;

create or replace function payrail._write_provider_method_change(
  p_change payrail.provider_method_change,
  p_record_id bigint,
  p_expected_version integer,
  p_as_draft boolean
)
returns table (record_id bigint, record_version integer, outcome text)
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_written boolean := false;
begin
  if p_change.provider is null and p_change.method is null and p_change.guidance is null then
    -- The record as stored: only what the caller may write changes (the embedder its vector,
    -- an operator enabled), each by a statement naming its own columns.
    if p_change.embedding is not null and not p_as_draft then
      update payrail.provider_methods as pm
      set embedding = p_change.embedding, embedding_model = p_change.embedding_model,
          embedding_content_hash = p_change.embedding_content_hash
      where pm.id operator(pg_catalog.=) p_record_id;
      v_written := true;
    end if;
    if p_change.enabled is not null then
      update payrail.provider_methods as pm set enabled = p_change.enabled
      where pm.id operator(pg_catalog.=) p_record_id and pm.enabled operator(pg_catalog.<>) p_change.enabled;
      v_written := v_written or found;
    end if;
    return query
      select pm.id, pm.version, case when v_written then 'updated' else 'unchanged' end
      from payrail.provider_methods as pm where pm.id operator(pg_catalog.=) p_record_id;
    return;
  end if;
  -- As a draft without a vector: only the field rules can refuse it (the judge's write, rolled back).
  return query
    select s.record_id, s.record_version, s.outcome
    from payrail.save_provider_method(
      p_record_id, p_expected_version, p_change.provider, p_change.method, coalesce(p_change.urls, '{}'), p_change.docs_url,
      p_change.guidance, case when p_as_draft then false else p_change.enabled end,
      case when not p_as_draft then p_change.embedding end, case when not p_as_draft then p_change.embedding_model end,
      p_change.mixed_scripts) as s;
end
$$;

comment on function payrail._write_provider_method_change(payrail.provider_method_change, bigint, integer, boolean) is
$$Writes one change of payrail.save_provider_methods' batch: through payrail.save_provider_method, or for a record as stored (no fields) its vector and enabled.

p_as_draft: enabled false and no vector, so only the field rules judge it (in a block the caller rolls back).$$;

create or replace function payrail._broken_rules(
  p_change payrail.provider_method_change,
  p_record_id bigint,
  p_constraint text,
  p_column text,
  p_message text,
  p_hint text
)
returns jsonb
language plpgsql
stable
security invoker
set search_path from current
as $$
declare
  v_rules jsonb;
begin
  -- Every rule at once, as payrail.check_provider_method judges the fields.
  select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object('constraint', c.constraint_name, 'fields', pg_catalog.to_jsonb(c.fields),
                                                            'rule', c.rule, 'remedy', c.remedy))
    into v_rules
  from payrail.check_provider_method(p_record_id, p_change.provider, p_change.method, coalesce(p_change.urls, '{}'),
                                     p_change.docs_url, p_change.guidance, p_change.mixed_scripts) as c;
  if v_rules is not null then
    return v_rules;
  end if;
  -- A rule that is about no field's value alone: its words in payrail.rules, else the error's own.
  return pg_catalog.jsonb_build_array(coalesce(
    (select pg_catalog.jsonb_build_object('constraint', r.constraint_name, 'fields', pg_catalog.to_jsonb(r.fields), 'rule', r.rule, 'remedy', r.remedy)
     from payrail.rules as r where r.constraint_name operator(pg_catalog.=) p_constraint),
    pg_catalog.jsonb_build_object('constraint', p_constraint,
                                  'fields', case when p_column is null then '[]'::jsonb else pg_catalog.jsonb_build_array(p_column) end,
                                  'rule', pg_catalog.lower(pg_catalog."left"(p_message, 1)) operator(pg_catalog.||) pg_catalog.substr(p_message, 2),
                                  'remedy', coalesce(p_hint, ''))));
end
$$;

comment on function payrail._broken_rules(payrail.provider_method_change, bigint, text, text, text, text) is
$$Every rule a change breaks, as JSON [{"constraint", "fields", "rule", "remedy"}], for the error with which the database refused it.

p_record_id: the record it was saved as (NULL: a new one). The fields as payrail.check_provider_method
judges them; a refusal about no field's value in payrail.rules' words for its constraint, failing
those in the error's message and hint.$$;

create or replace function payrail._rules_in_words(p_rules jsonb)
returns text
language sql
immutable
security invoker
set search_path from current
return (
  select pg_catalog.string_agg(
           pg_catalog.concat_ws(': ', s.subject, r.value operator(pg_catalog.->>) 'rule')
             operator(pg_catalog.||) '. ' operator(pg_catalog.||) (r.value operator(pg_catalog.->>) 'remedy')
             operator(pg_catalog.||) coalesce(' (' operator(pg_catalog.||) (r.value operator(pg_catalog.->>) 'constraint') operator(pg_catalog.||) ')', ''),
           '; ' order by r.n)
  from pg_catalog.jsonb_array_elements(p_rules) with ordinality as r(value, n)
  cross join lateral (
    select case when pg_catalog.jsonb_array_length(r.value operator(pg_catalog.->) 'fields') operator(pg_catalog.>) 0
                then (select pg_catalog.string_agg(f.field, ' and ') from pg_catalog.jsonb_array_elements_text(r.value operator(pg_catalog.->) 'fields') as f(field)) end
  ) as s(subject));

comment on function payrail._rules_in_words(jsonb) is
$$payrail._broken_rules' rules in one line: "docs_url: must be ... Write ... (provider_methods_docs_url_check); ...".$$;

create or replace function payrail.save_provider_methods(
  p_changes payrail.provider_method_change[],
  p_embed_drafts boolean default true,
  p_checked boolean default false
)
returns setof payrail.provider_method_outcome
language plpgsql
volatile
security invoker
set search_path from current
-- Every read is a lookup by a key: by its index, whatever the statistics say (right after a load).
set enable_seqscan = off
as $$
declare
  v_count constant integer := coalesce(pg_catalog.cardinality(p_changes), 0);
  v_model payrail.embedding_model;
  v_answers payrail.provider_method_outcome[] := '{}';
  -- Per change, what its write did, kept once every write succeeded.
  v_saved_outcomes text[];
  v_saved_ids bigint[];
  v_saved_versions integer[];
  v_answer payrail.provider_method_outcome;
  v_change payrail.provider_method_change;
  v_record payrail.provider_methods;
  v_current boolean;
  -- Per change: the record it is for (NULL: a new one), its names' unique key, the earlier change
  -- of the same record; the changes in the order they lock and write (every writer's order:
  -- existing records by id, then new ones by name key).
  v_found_ids bigint[];
  v_name_keys text[];
  v_same_as integer[];
  v_order integer[];
  v_stored boolean;
  v_enabled boolean;
  v_content_hash bytea;
  v_changed boolean;
  v_usable_vector boolean;
  v_blocked boolean;
  v_adopt_model boolean := false;
  v_failed boolean := false;
  v_at integer;
  v_written record;
  v_state text;
  v_constraint text;
  v_column text;
  v_message text;
  v_hint text;
  i integer;
begin
  if v_count operator(pg_catalog.=) 0 then
    return;
  end if;

  -- The registry's model first, locked while vectors are written (every vector writer takes it
  -- before any record, so a model switch cannot interleave): a vector must be the model's; the
  -- first vector a registry is given chooses its model.
  if exists (select from pg_catalog.unnest(p_changes) as c where c.embedding is not null) then
    select * into v_model from payrail.embedding_model for share;
    if v_model.name is null then
      -- None yet: the first vector's, which the save makes the registry's (and nothing else does).
      v_adopt_model := true;
      select c.embedding_model, vector_dims(c.embedding) into v_model.name, v_model.dimensions
      from pg_catalog.unnest(p_changes) as c where c.embedding is not null limit 1;
    end if;
    select pg_catalog.format('the embedding of change %s is from model %s (%s dimensions), not the registry''s model %s (%s dimensions)',
                             c.n, coalesce(c.embedding_model, 'unnamed'), vector_dims(c.embedding), v_model.name, v_model.dimensions)
      into v_message
    from pg_catalog.unnest(p_changes) with ordinality as c(record_id, expected_version, provider, method, urls, docs_url, guidance,
                                                          enabled, mixed_scripts, embedding, embedding_model, embedding_content_hash, n)
    where c.embedding is not null
      and (coalesce(c.embedding_model operator(pg_catalog.<>) v_model.name, true)
           or vector_dims(c.embedding) operator(pg_catalog.<>) v_model.dimensions)
    order by c.n limit 1;
    if v_message is not null then
      raise exception using errcode = 'PYE02', message = v_message,
        hint = 'Embed with the model payrail.get_embedding_model() returns, or switch the registry''s model first.';
    end if;
  else
    select * into v_model from payrail.embedding_model;
  end if;

  -- Which record each change is for, found without a lock: by id, or by name through the unique
  -- key's index (a change that must be new is not looked up); two changes that name one record
  -- the same way (its id, or its names).
  select pg_catalog.array_agg(r.id order by r.n), pg_catalog.array_agg(r.name_key order by r.n),
         pg_catalog.array_agg(case when r.first operator(pg_catalog.<>) r.n then r.first::integer end order by r.n),
         pg_catalog.array_agg(r.n::integer order by r.id nulls last, r.name_key, r.n)
    into v_found_ids, v_name_keys, v_same_as, v_order
  from (
    select c.n, f.id, k.name_key,
           pg_catalog.min(c.n) over (partition by coalesce('id ' operator(pg_catalog.||) c.record_id::text,
                                                           'name ' operator(pg_catalog.||) k.name_key,
                                                           'change ' operator(pg_catalog.||) c.n::text)) as first
    from pg_catalog.unnest(p_changes) with ordinality as c(record_id, expected_version, provider, method, urls, docs_url, guidance,
                                                          enabled, mixed_scripts, embedding, embedding_model, embedding_content_hash, n)
    left join lateral (
      select pm.id, pm.provider, pm.method from payrail.provider_methods as pm where pm.id operator(pg_catalog.=) c.record_id
      union all
      select pm.id, pm.provider, pm.method from payrail.provider_methods as pm
      where c.record_id is null and coalesce(c.expected_version operator(pg_catalog.<>) 0, true)
        and payrail._normalize_name(pm.provider) operator(pg_catalog.=) payrail._normalize_name(c.provider)
        and payrail._normalize_name(pm.method) operator(pg_catalog.=) payrail._normalize_name(c.method)
    ) as f on true
    cross join lateral (
      select payrail._normalize_name(coalesce(c.provider, f.provider)) operator(pg_catalog.||) E'\x1f'
               operator(pg_catalog.||) payrail._normalize_name(coalesce(c.method, f.method))
    ) as k(name_key)
  ) as r;

  -- Then locked, in id order: no two writers of this registry wait for each other in a circle.
  perform from payrail.provider_methods as pm where pm.id operator(pg_catalog.=) any (v_found_ids) order by pm.id for update;

  -- Judge each change against the records as locked: conflicts, the vector given, what needs one.
  for i in 1 .. v_count loop
    v_change := p_changes[i];
    v_record := null;
    v_current := false;
    if v_found_ids[i] is not null then
      select * into v_record from payrail.provider_methods as pm where pm.id operator(pg_catalog.=) v_found_ids[i];
      v_current := coalesce((select s.has_current_vector from payrail.provider_method_states as s where s.id operator(pg_catalog.=) v_found_ids[i]), false);
      if v_change.record_id is null and v_record.id is not null
         and payrail._normalize_name(v_record.provider) operator(pg_catalog.||) E'\x1f' operator(pg_catalog.||) payrail._normalize_name(v_record.method)
             operator(pg_catalog.<>) v_name_keys[i] then
        raise exception using
          errcode = 'serialization_failure',
          message = pg_catalog.format('record %s was renamed while change %s was saved; nothing was saved', v_record.id, i),
          hint = 'Call again: the change is then judged against the record as it is.';
      end if;
    end if;
    v_stored := v_change.provider is null and v_change.method is null and v_change.guidance is null
                and v_change.urls is null and v_change.docs_url is null;
    v_enabled := coalesce(v_change.enabled, v_record.enabled, false);
    v_answer := row(i, 'ready', v_record.id, v_record.version, null, null, v_enabled, false, null, null, null, null, null, null, null,
                    v_name_keys[i])::payrail.provider_method_outcome;
    if v_stored then
      v_answer.provider := v_record.provider;
      v_answer.method := v_record.method;
      v_content_hash := v_record.content_hash;
      v_answer.embedding_text := payrail._embedding_text(v_record.provider, v_record.method, v_record.guidance);
    else
      v_answer.provider := payrail._canonical_name(v_change.provider);
      v_answer.method := payrail._canonical_name(v_change.method);
      v_content_hash := payrail._content_hash(v_answer.provider, v_answer.method, v_change.guidance);
      v_answer.embedding_text := payrail._embedding_text(v_answer.provider, v_answer.method, v_change.guidance);
    end if;
    v_changed := v_record.id is null or v_record.content_hash operator(pg_catalog.<>) v_content_hash;
    v_usable_vector := v_change.embedding is not null
                       and coalesce(v_change.embedding_content_hash operator(pg_catalog.=) v_content_hash, false);

    if v_same_as[i] is not null then
      v_answer.outcome := 'refused';
      v_answer.same_as := v_same_as[i];
      v_answer.rules := pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
        'constraint', null, 'fields', '["provider", "method"]'::jsonb,
        'rule', pg_catalog.format('the same record as change %s of this batch', v_same_as[i]),
        'remedy', 'Make one change of each record.'));
    elsif not v_stored and (v_change.provider is null or v_change.method is null or v_change.guidance is null) then
      v_answer.outcome := 'refused';
      v_answer.rules := pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
        'constraint', null,
        'fields', (select pg_catalog.jsonb_agg(f.field order by f.n) from pg_catalog.unnest(array['provider', 'method', 'guidance'],
                     array[v_change.provider, v_change.method, v_change.guidance]) with ordinality as f(field, value, n) where f.value is null),
        'rule', 'is missing: a change gives provider, method and guidance, or none of them (the record as it is stored)',
        'remedy', 'Give every field, or none to embed, enable or disable the record as it is.'));
    elsif v_stored and v_change.record_id is null then
      v_answer.outcome := 'refused';
      v_answer.rules := pg_catalog.jsonb_build_array(pg_catalog.jsonb_build_object(
        'constraint', null, 'fields', '[]'::jsonb, 'rule', 'names no record: a change without fields is for the record of its record_id',
        'remedy', 'Give the record''s id, or its fields.'));
    elsif payrail._edit_conflict(v_change.record_id, v_record,
                                 case when v_change.expected_version operator(pg_catalog.<>) 0 then v_change.expected_version end) is not null then
      v_answer.outcome := 'conflict';
      v_answer.reason := payrail._edit_conflict(v_change.record_id, v_record,
                                                case when v_change.expected_version operator(pg_catalog.<>) 0 then v_change.expected_version end);
    elsif (v_change.embedding is not null and not v_usable_vector)
          or (v_change.embedding is null
              and (v_enabled or p_embed_drafts)
              and (case when v_stored then not v_current else v_changed or (v_enabled and not v_current) end)) then
      -- A vector of other content than the change's is stale, never saved, whatever the record holds now.
      v_answer.outcome := 'needs_embedding';
      v_answer.reason := case
        when v_change.embedding is not null then 'the embedding given was made from other content than this change''s (stale)'
        when v_record.id is null then 'a new record'
        when v_changed then 'its provider, method or guidance changes'
        when v_enabled then 'it will be enabled, and has no vector of its current content'
        else 'it has no vector of its current content' end;
      v_answer.embedding_content_hash := v_content_hash;
      v_answer.embedding_model := v_model.name;
      v_answer.embedding_dimensions := v_model.dimensions;
    end if;
    if v_answer.outcome operator(pg_catalog.<>) 'needs_embedding' then
      v_answer.embedding_text := null;
    end if;
    v_answer.has_current_vector := v_usable_vector or (v_current and not v_changed);
    v_answers := v_answers operator(pg_catalog.||) v_answer;
  end loop;

  v_blocked := exists (select from pg_catalog.unnest(v_answers) as a where a.outcome operator(pg_catalog.<>) 'ready');
  if not v_blocked then
    -- Save: every change in the lock order, in one block, undone whole when the database refuses one.
    begin
      if v_adopt_model then
        perform payrail.set_embedding_model(v_model.name, v_model.dimensions);
      end if;
      foreach i in array v_order loop
        v_at := i;
        select * into v_written
        from payrail._write_provider_method_change(p_changes[i], v_found_ids[i],
               -- A new record: must be new when the caller said so; else one saved by name meanwhile is the one to update.
               case when v_found_ids[i] is null and (p_changes[i]).expected_version operator(pg_catalog.=) 0 then 0 end, false);
        v_saved_outcomes[i] := v_written.outcome;
        v_saved_ids[i] := v_written.record_id;
        v_saved_versions[i] := v_written.record_version;
      end loop;
    exception when data_exception or integrity_constraint_violation then
      get stacked diagnostics v_state = returned_sqlstate, v_constraint = constraint_name, v_column = column_name,
                              v_message = message_text, v_hint = pg_exception_hint;
      if v_column operator(pg_catalog.=) 'embedding' then
        raise;  -- the vector itself (its length): the caller's embedding, no rule of the record
      end if;
      if v_state operator(pg_catalog.=) '23505' and v_at is not null and v_found_ids[v_at] is null and (p_changes[v_at]).expected_version is null then
        raise exception using
          errcode = 'serialization_failure',
          message = pg_catalog.format('another transaction saved a record named as change %s meanwhile; nothing was saved', v_at),
          hint = 'Call again: the change then updates that record.';
      end if;
      v_failed := true;
    end;
    if not v_failed then
      return query
        select w.n::integer, w.outcome, w.record_id, w.record_version, s.provider, s.method, s.enabled, s.has_current_vector,
               null::text, null::jsonb, null::integer, null::text, null::bytea, null::text, null::integer, v_name_keys[w.n]
        from rows from (pg_catalog.unnest(v_saved_outcomes), pg_catalog.unnest(v_saved_ids), pg_catalog.unnest(v_saved_versions))
          with ordinality as w(outcome, record_id, record_version, n)
        cross join lateral (select s.* from payrail.provider_method_states as s where s.id operator(pg_catalog.=) w.record_id offset 0) as s
        order by w.n;
      return;
    end if;
  end if;

  -- Not saved. Every change whose fields stand to be judged is written as a draft, in a block that
  -- is always undone: at once first (nearly always nothing refuses), then, if something did, one at
  -- a time, each in a block of its own, asking the rules' words for each that fails; later
  -- changes see the earlier ones, so two changes that collide are told so. Changes the caller
  -- checked already (p_checked) are not judged again for a vector they need.
  for v_pass in 1 .. case when v_blocked and p_checked then 0 else 2 end loop
    v_failed := false;
    begin
      foreach i in array v_order loop
        continue when v_answers[i].outcome operator(pg_catalog.<>) all (array['ready', 'needs_embedding'])
                      or (p_changes[i]).provider is null;
        if v_pass operator(pg_catalog.=) 1 then
          perform from payrail._write_provider_method_change(p_changes[i], v_found_ids[i],
                         case when v_found_ids[i] is null then 0 end, true);
        else
          begin
            perform from payrail._write_provider_method_change(p_changes[i], v_found_ids[i],
                           case when v_found_ids[i] is null then 0 end, true);
          exception when data_exception or integrity_constraint_violation then
            get stacked diagnostics v_constraint = constraint_name, v_column = column_name, v_message = message_text, v_hint = pg_exception_hint;
            v_answers[i].outcome := 'refused';
            v_answers[i].reason := null;
            v_answers[i].embedding_text := null;
            v_answers[i].embedding_content_hash := null;
            v_answers[i].embedding_model := null;
            v_answers[i].embedding_dimensions := null;
            v_answers[i].rules := payrail._broken_rules(p_changes[i], v_found_ids[i], v_constraint, v_column, v_message, v_hint);
          end;
        end if;
      end loop;
      raise exception using errcode = 'PYW01', message = 'the judge''s writes are undone';
    exception
      when sqlstate 'PYW01' then
        null;
      when data_exception or integrity_constraint_violation then
        v_failed := true;
    end;
    exit when not v_failed;
  end loop;

  if not v_blocked and not exists (select from pg_catalog.unnest(v_answers) as a where a.outcome operator(pg_catalog.=) 'refused') then
    -- The save was refused, but no change alone is: another writer changed something meanwhile.
    raise exception using
      errcode = 'serialization_failure',
      message = pg_catalog.format('the save was refused (%s), though no change alone breaks a rule: another transaction changed the registry meanwhile; nothing was saved', v_message),
      hint = 'Call again.';
  end if;
  return query
    select a.change, a.outcome, a.record_id, a.record_version, a.provider, a.method, a.enabled, a.has_current_vector,
           case when a.outcome operator(pg_catalog.=) 'ready'
                then 'nothing stands in its way, but other changes of the batch are refused, conflict or need a vector: nothing was saved'
                else coalesce(a.reason, payrail._rules_in_words(a.rules)) end,
           a.rules, a.same_as, a.embedding_text, a.embedding_content_hash,
           a.embedding_model, a.embedding_dimensions, a.name_key
    from pg_catalog.unnest(v_answers) as a
    order by a.change;
end
$$;

comment on function payrail.save_provider_methods(payrail.provider_method_change[], boolean, boolean) is
$$Saves a batch of changes in one statement, all or nothing, or answers why not: one row per change (payrail.provider_method_outcome).

The write path of import, edit, sync, restore, the bulk actions and the backoffice, and of psql.
Records are locked in a stable order (existing ones by id, then new ones by name key; the
registry's model first when vectors are written), names are stored trimmed and in NFC, and each
change is judged against the records as locked: an edit of another version than expected_version
(or of a record deleted since) is a conflict, in payrail._edit_conflict's words; every rule a
change breaks is named in words (rules), as payrail.check_provider_method gives them, not only the
first; a change that needs a vector (new or changed content, or a record enabled without a current
vector; with p_embed_drafts false, only a record that will be enabled) and brings none of that
content is answered needs_embedding, with the text to embed and the registry's model (p_checked:
the changes were checked already, in a transaction rolled back, so they are not judged again to
be answered so). Nothing is saved then: embed each embedding_text, and call again with the vectors (embedding, embedding_model,
and the embedding_content_hash answered with the text: a vector of other content is stale and
never saved). When nothing stands in the way, every change is saved (created, updated or
unchanged). The triggers and constraints still judge every write, as they do an UPDATE in psql.

A change without fields (provider, method, urls, docs_url and guidance NULL) is for its record_id as
stored: its vector (sync) or its enabled state (enable, disable). Errors: PYE02 for a vector of
another model than the registry's; 40001 (serialization_failure) when another transaction changed
what a change is for meanwhile: call again.
select * from payrail.save_provider_methods(payrail.provider_method_changes(
  '[{"record_id": 42, "expected_version": 3, "provider": "Acme Maps", "method": "Geocode", "urls": ["https://api.acme.example"],
     "guidance": "Purpose: turn an address into coordinates."}]'));$$;
