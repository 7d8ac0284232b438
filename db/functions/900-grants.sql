-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- Functions are executable by PUBLIC by default; in this schema only the grants below apply.
-- Revoked from the registry's roles too, so a rerun also takes back what an earlier version
-- granted (revoking a table's privileges revokes its column privileges as well).
revoke all on all functions in schema payrail from public, payrail_agent, payrail_operator, payrail_embedder;
revoke all on all tables in schema payrail from public, payrail_agent, payrail_operator, payrail_embedder;

grant usage on schema payrail to payrail_agent, payrail_operator, payrail_embedder;

-- Which schema version the registry holds, and whether an apply is due (`payrail-embedder db status`).
grant execute on function payrail.get_schema_version() to payrail_operator, payrail_embedder;

-- Agents: search only. The search functions are security definer, so agents never read a table
-- and disabled drafts stay invisible to them.
grant execute on function
  payrail.search_provider_methods(text, vector, text),
  payrail.query_takes_name_path(text),
  payrail.get_embedding_model()
  to payrail_agent, payrail_operator, payrail_embedder;

-- The immutable helpers that the constraints, the generated column, the name indexes and the
-- triggers call with the writer's privileges.
grant execute on function
  payrail._trim_white_space(text),
  payrail._white_space_characters(),
  payrail._invisible_characters(),
  payrail._is_blank(text),
  payrail._fold_case(text),
  payrail._canonical_name(text),
  payrail._normalize_name(text),
  payrail._content_hash(text, text, text),
  payrail._is_valid_name(text),
  payrail._is_https_url(text),
  payrail._are_https_urls(text[]),
  payrail._has_duplicates(text[]),
  payrail._is_storable_vector_length(vector),
  payrail._acting_role(),
  payrail._author(),
  -- What names and hosts look like (db/schema/016-unicode_security.sql, 018-lookalikes.sql).
  payrail._unicode_security_source(),
  payrail._confusable_prototypes(),
  payrail._confusable_ascii_sources(),
  payrail._skeleton(text),
  payrail._lookalike_key(text),
  payrail._script_range_starts(),
  payrail._script_range_sets(),
  payrail._script_sets(),
  payrail._script_names(),
  payrail._latin_or_common_characters(),
  payrail._script_set(text),
  payrail._mixes_scripts(text),
  payrail._scripts_in_words(text),
  payrail._url_authority(text),
  payrail._url_host(text),
  payrail._has_ascii_host(text),
  payrail._have_ascii_hosts(text[]),
  payrail._punycode_decoded(text),
  payrail._unicode_host(text),
  payrail._host_lookalike_key(text)
  to payrail_operator, payrail_embedder;

-- The lookalike rule (tg_provider_methods__refuse_lookalikes), its words, and the list of stored
-- look-alikes for a registry that held some before the rule.
grant execute on function
  payrail._lookalikes(bigint, text, text, text),
  payrail._lookalikes_by_key(bigint, text, text, text, text, text, text),
  payrail._lookalike_in_words(text, text, payrail.provider_methods),
  payrail._lookalike_constraint(text),
  payrail._written_by_this_transaction(bigint),
  payrail.find_lookalikes()
  to payrail_operator;

-- Operators: the public fields and enabled; never the vector columns. The records list reads the
-- list entries (counts, filters); only the trigger tg_provider_methods__keep_list_entry writes them.
grant execute on function payrail.list_provider_methods(text, text, integer, text, text, bigint, boolean) to payrail_operator, payrail_embedder;
grant select on payrail.provider_methods, payrail.embedding_model, payrail.provider_method_states,
                payrail.provider_method_list_entries, payrail.provider_method_list_entry_states to payrail_operator;
grant insert (provider, method, urls, docs_url, guidance, enabled, mixed_scripts),
      update (provider, method, urls, docs_url, guidance, enabled, mixed_scripts),
      delete
  on payrail.provider_methods to payrail_operator;

-- Embedder: reads content, writes vectors and chooses the first model.
grant select on payrail.provider_methods, payrail.embedding_model, payrail.provider_method_states,
                payrail.provider_method_list_entries, payrail.provider_method_list_entry_states to payrail_embedder;
grant update (embedding, embedding_model, embedding_content_hash) on payrail.provider_methods to payrail_embedder;
-- A new record saved with its vector (the write path) inserts these columns too: a login holding
-- both roles can; the embedder alone cannot insert a row (it has no public field to insert).
grant insert (embedding, embedding_model, embedding_content_hash) on payrail.provider_methods to payrail_embedder;
grant insert, update on payrail.embedding_model to payrail_embedder;
grant execute on function payrail.set_embedding_model(text, integer) to payrail_embedder;

-- The write path: a batch saved in one statement, or answered (save_provider_methods, with its
-- JSON form); one record saved (save_provider_method), and the delete, each refusing an edit
-- conflict. Each runs with its caller's privileges: an operator saves public fields and enabled,
-- the embedder a record's vector as stored (sync), a login holding both content with its vector
-- (import, edit and the backoffice need both roles).
grant execute on function
  payrail.save_provider_methods(payrail.provider_method_change[], boolean, boolean),
  payrail.provider_method_changes(jsonb, vector[]),
  payrail._write_provider_method_change(payrail.provider_method_change, bigint, integer, boolean),
  payrail._embedding_text(text, text, text),
  payrail._edit_conflict(bigint, payrail.provider_methods, integer),
  payrail._rules_in_words(jsonb)
  to payrail_operator, payrail_embedder;
grant execute on function
  payrail.save_provider_method(bigint, integer, text, text, text[], text, text, boolean, vector, text, boolean),
  payrail.delete_provider_method(bigint, integer, boolean),
  payrail._refuse_edit_conflict(bigint, payrail.provider_methods, integer),
  payrail._broken_rules(payrail.provider_method_change, bigint, text, text, text, text)
  to payrail_operator;

-- The rules in words: every writer reads them to say why a value was refused, and asks
-- check_provider_method for all the rules a record breaks at once.
grant select on payrail.rules to payrail_operator, payrail_embedder;
grant execute on function
  payrail.check_provider_method(bigint, text, text, text[], text, text, boolean),
  payrail._offending_urls_in_words(text, text[])
  to payrail_operator;

-- History: operators read it and restore from it. Only the security-definer trigger
-- tg_provider_methods__record_history writes it: no role inserts, updates or deletes an entry.
grant select on payrail.provider_method_history to payrail_operator;
grant execute on function
  payrail.get_provider_method_history(text, text),
  payrail.restore_provider_method(bigint, boolean)
  to payrail_operator;

-- Bulk actions: operators begin them (what and why; who, when and in which transaction are
-- tg_bulk_actions__begin's to stamp) and read them with their records, which only the security
-- definer trigger tg_provider_methods__record_bulk_action writes: who did what is the database's account.
grant select on payrail.bulk_actions, payrail.bulk_action_records to payrail_operator;
grant insert (operation, selection, undoes, with_golden_queries) on payrail.bulk_actions to payrail_operator;
grant execute on function
  payrail.begin_bulk_action(text, text, bigint, boolean),
  payrail._bulk_action_under_way()
  to payrail_operator;

-- Preview: operators see what search would answer with a draft enabled. It runs with their own
-- privileges (they read drafts anyway), so it calls the search helpers as they are, and reads the
-- bounds agent logins are held to (payrail.agent_logins; only the owner writes them, agents read
-- nothing of them but through search's own check).
grant execute on function
  payrail.preview_search(text, text, text, vector, text),
  payrail._search(text, vector, text, bigint),
  payrail._first_pass(vector, bigint, boolean, integer, double precision),
  payrail._name_path_matches(text, bigint),
  payrail._check_query(text),
  payrail._refuse_lifted_limits(),
  payrail._session_login_limits(),
  payrail._login_limits_of(name),
  payrail._milliseconds(text),
  payrail._half_precision_error_bound(integer)
  to payrail_operator;
grant select on payrail.agent_logins to payrail_operator;
do $$
begin
  if pg_catalog.to_regclass('payrail.provider_method_half_vectors') is not null then
    grant select on payrail.provider_method_half_vectors to payrail_operator;
  end if;
end
$$;

-- Golden queries: evaluation and training data, never search's. Operators read and write them (the
-- rules are the tables' own, so psql writes obey them too); the embedder reads them (eval, model
-- tune); agents nothing. Who added one and when are the trigger's to write, never the writer's.
grant select on payrail.golden_queries, payrail.golden_query_records to payrail_operator, payrail_embedder;
grant insert (query, language), delete on payrail.golden_queries to payrail_operator;
grant insert (golden_query_id, record_id, ordinal), delete on payrail.golden_query_records to payrail_operator;
grant execute on function
  payrail.add_golden_query(text, bigint[], text),
  payrail.remove_golden_query(text),
  payrail._golden_query_named(text),
  payrail._refuse_golden_query_without_records(text)
  to payrail_operator;
grant execute on function payrail._golden_query_named(text) to payrail_embedder;
-- Their embeddings (the backoffice ranks golden queries with them; search never reads them): the
-- embedder writes them, operators and the embedder read them, agents nothing.
grant select on payrail.golden_query_embeddings to payrail_operator, payrail_embedder;
grant insert, update, delete on payrail.golden_query_embeddings to payrail_embedder;

-- Advice on the editorial template (180-template_advice.sql): operators read it, and the embedder,
-- which reads every record's content anyway; agents never (it would tell them of drafts).
grant execute on function
  payrail.get_template_advice_kinds(),
  payrail.advise_provider_method(text, text, text, text),
  payrail.advise_provider_methods(bigint[]),
  payrail.count_template_advice(bigint[]),
  payrail._template_words(text),
  payrail._template_word_count(text[]),
  payrail._vague_purpose_in_words(text, text, text),
  payrail._markup_in_words(text)
  to payrail_operator, payrail_embedder;

-- Model switch: the embedder stages the next model's vectors and switches.
grant select, insert, update, delete on payrail.embedding_staging to payrail_embedder;
grant execute on function payrail.switch_embedding_model(text, integer) to payrail_embedder;
