-- Privileges of the write path's additions (history, restore, preview, staging, model switch):
-- each role gets what its job needs and nothing more. Behaviour under each role is in 120-provider_method_history, 210-preview_search and 300-model_switch.
begin;
select plan(34);

-- provider_method_history: operators read it; only the security-definer trigger writes it, so no
-- role can add, change or remove an entry, not even column by column.
select table_privs_are('payrail', 'provider_method_history', 'payrail_operator', array['SELECT'],
  'history: operators have table-level SELECT only');
select is_empty(
  $$select a.attname::text from pg_attribute as a
    where a.attrelid = 'payrail.provider_method_history'::regclass and a.attnum > 0 and not a.attisdropped
      and (has_column_privilege('payrail_operator', a.attrelid, a.attnum, 'INSERT')
           or has_column_privilege('payrail_operator', a.attrelid, a.attnum, 'UPDATE'))$$,
  'history: operators may insert or update no column');
select table_privs_are('payrail', 'provider_method_history', 'payrail_agent', array[]::text[],
  'history: agents have no access');
select table_privs_are('payrail', 'provider_method_history', 'payrail_embedder', array[]::text[],
  'history: the embedder has no access (its vector writes make no version)');

-- embedding_staging: the embedder's alone.
select table_privs_are('payrail', 'embedding_staging', 'payrail_embedder', array['DELETE', 'INSERT', 'SELECT', 'UPDATE'],
  'staging: the embedder stages, re-stages and clears vectors');
select table_privs_are('payrail', 'embedding_staging', 'payrail_operator', array[]::text[],
  'staging: operators have no access');
select table_privs_are('payrail', 'embedding_staging', 'payrail_agent', array[]::text[],
  'staging: agents have no access');

-- Functions.
select function_privs_are('payrail', 'switch_embedding_model', array['text', 'integer'], 'payrail_embedder', array['EXECUTE'],
  'switch_embedding_model: the embedder may switch');
select function_privs_are('payrail', 'switch_embedding_model', array['text', 'integer'], 'payrail_operator', array[]::text[],
  'switch_embedding_model: operators may not');
select function_privs_are('payrail', 'switch_embedding_model', array['text', 'integer'], 'payrail_agent', array[]::text[],
  'switch_embedding_model: agents may not');
select function_privs_are('payrail', 'restore_provider_method', array['bigint', 'boolean'], 'payrail_operator', array['EXECUTE'],
  'restore_provider_method: operators may restore');
select function_privs_are('payrail', 'restore_provider_method', array['bigint', 'boolean'], 'payrail_embedder', array[]::text[],
  'restore_provider_method: the embedder may not');
select function_privs_are('payrail', 'restore_provider_method', array['bigint', 'boolean'], 'payrail_agent', array[]::text[],
  'restore_provider_method: agents may not');
select function_privs_are('payrail', 'get_provider_method_history', array['text', 'text'], 'payrail_operator', array['EXECUTE'],
  'get_provider_method_history: operators may read history');
select function_privs_are('payrail', 'get_provider_method_history', array['text', 'text'], 'payrail_agent', array[]::text[],
  'get_provider_method_history: agents may not');
select function_privs_are('payrail', 'preview_search', array['text', 'text', 'text', 'vector', 'text'], 'payrail_operator', array['EXECUTE'],
  'preview_search: operators may preview');
select function_privs_are('payrail', 'preview_search', array['text', 'text', 'text', 'vector', 'text'], 'payrail_agent', array[]::text[],
  'preview_search: agents may not (it shows drafts)');
select function_privs_are('payrail', 'preview_search', array['text', 'text', 'text', 'vector', 'text'], 'payrail_embedder', array[]::text[],
  'preview_search: the embedder may not');
select function_privs_are('payrail', '_search', array['text', 'vector', 'text', 'bigint'], 'payrail_agent', array[]::text[],
  '_search: agents reach it only through search_provider_methods');
select function_privs_are('payrail', '_first_pass', array['vector', 'bigint', 'boolean', 'integer', 'double precision'], 'payrail_agent', array[]::text[],
  '_first_pass: agents reach it only through search_provider_methods');
select function_privs_are('payrail', '_first_pass', array['vector', 'bigint', 'boolean', 'integer', 'double precision'], 'payrail_operator', array['EXECUTE'],
  '_first_pass: operators run it for preview_search, with their own privileges');
select function_privs_are('payrail', '_search', array['text', 'vector', 'text', 'bigint'], 'payrail_operator', array['EXECUTE'],
  '_search: operators run it for preview_search, with their own privileges');
select function_privs_are('payrail', '_name_path_matches', array['text', 'bigint'], 'payrail_agent', array[]::text[],
  '_name_path_matches: agents may not call it directly');

-- The batch entry point: operators and the embedder (each with its own privileges), never agents.
select function_privs_are('payrail', 'save_provider_methods', array['payrail.provider_method_change[]', 'boolean', 'boolean'], 'payrail_operator', array['EXECUTE'],
  'save_provider_methods: operators may save');
select function_privs_are('payrail', 'save_provider_methods', array['payrail.provider_method_change[]', 'boolean', 'boolean'], 'payrail_embedder', array['EXECUTE'],
  'save_provider_methods: the embedder may call it (to write vectors of records as stored)');
select function_privs_are('payrail', 'save_provider_methods', array['payrail.provider_method_change[]', 'boolean', 'boolean'], 'payrail_agent', array[]::text[],
  'save_provider_methods: agents may not');
select function_privs_are('payrail', 'provider_method_changes', array['jsonb', 'vector[]'], 'payrail_agent', array[]::text[],
  'provider_method_changes: agents may not');
select function_privs_are('payrail', '_broken_rules', array['payrail.provider_method_change', 'bigint', 'text', 'text', 'text', 'text'], 'payrail_embedder', array[]::text[],
  '_broken_rules: only operators judge fields');

-- None of the additions runs with its owner's privileges.
select is_empty(
  $$select p.oid::regprocedure::text from pg_proc as p
    where p.pronamespace = 'payrail'::regnamespace and p.prosecdef
      and p.proname in ('get_provider_method_history', 'restore_provider_method', 'save_provider_method',
                        'save_provider_methods', 'provider_method_changes', '_write_provider_method_change', '_broken_rules',
                        'preview_search', '_search', '_first_pass', 'switch_embedding_model')$$,
  'history reads, restore, saves, preview, search helpers and switch functions are security invoker');
select is(
  (select count(*)::int from pg_proc as p where p.pronamespace = 'payrail'::regnamespace
     and p.proname in ('save_provider_methods', 'provider_method_changes', '_write_provider_method_change', '_broken_rules')),
  4, '... the batch''s four functions among them');

-- Behaviour: a login holding only payrail_operator edits, and its edits are in the history under its name.
select payrail.set_embedding_model('test-model', 3);
insert into payrail.provider_methods (provider, method, guidance) values ('Acme', 'Draft', 'First.');
set local role payrail_operator;
select lives_ok(
  $$update payrail.provider_methods set guidance = 'Second.' where provider = 'Acme'$$,
  'operator: an edit writes its history entry (through the security-definer trigger)');
select results_eq(
  $$select guidance, changed_by from payrail.provider_method_history$$,
  $$values ('First.', 'payrail_operator'::text)$$,
  'operator: ... the earlier version, attributed to the operator');
reset role;

-- The embedder writes vectors (the row trigger reads the model "for share": allowed to it).
set local role payrail_embedder;
select lives_ok(
  $$update payrail.provider_methods
    set embedding = '[1,0,0]', embedding_model = 'test-model', embedding_content_hash = content_hash$$,
  'embedder: writes a vector (and so takes the model row''s share lock)');
reset role;
select is_empty($$select * from payrail.provider_method_history where guidance = 'Second.'$$,
  'embedder: ... which is no new version');

select * from finish();
rollback;
