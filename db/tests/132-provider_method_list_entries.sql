-- payrail.provider_method_list_entries, the records list's narrow copy of each record, holds
-- exactly every record's entry whatever writes provider_methods; its states view says what the
-- records' own view says; operators and the embedder read it, nobody writes it, agents never see it.
begin;
select plan(17);

-- The entries equal payrail._list_entry of every record, and their text is the one the list's
-- filter always searched, spelt out here independently.
create function pg_temp.entries_match(p_description text)
returns text
language sql
as $$
  select set_eq(
    'select provider_method_id, enabled, embedding_model, provider_key, method_key, filter_text
     from payrail.provider_method_list_entries',
    $q$select id, enabled, embedding_model, lower(provider) as provider_key, lower(method) as method_key,
              lower(provider || ' ' || method || ' ' || guidance || ' ' || array_to_string(urls, ' ') || ' ' || coalesce(docs_url, '')) as filter_text
       from payrail.provider_methods$q$,
    p_description)
$$;

create function pg_temp.states_match(p_description text)
returns text
language sql
as $$
  select set_eq(
    'select provider_method_id, has_current_vector from payrail.provider_method_list_entry_states',
    'select id, has_current_vector from payrail.provider_method_states',
    p_description)
$$;

select payrail.set_embedding_model('test-model', 3);
insert into payrail.provider_methods (provider, method, urls, docs_url, guidance, enabled, embedding, embedding_model, embedding_content_hash)
values ('Acme Travel', 'Hotel Search', '{https://api.acme.example/hotels,https://acme.example/pricing}', 'https://docs.acme.example',
        'Purpose: FIND hotels.', true, '[1,0,0]', 'test-model', payrail._content_hash('Acme Travel', 'Hotel Search', 'Purpose: FIND hotels.')),
       ('Globex', 'Weather', '{}', null, 'Purpose: 100% of the forecast, it''s \ free.', false, null, null, null),
       ('ΣΟΦΊΑ', 'ΟΔΟΣ', '{}', null, 'Purpose: Ελληνικά.', false, null, null, null);
select pg_temp.entries_match('inserted records, enabled and drafts, have their entries');
select pg_temp.states_match('has_current_vector: the same in both views');

update payrail.provider_methods set guidance = 'Purpose: find hotels TONIGHT.', embedding = '[0,1,0]',
  embedding_content_hash = payrail._content_hash(provider, method, 'Purpose: find hotels TONIGHT.')
where method = 'Hotel Search';
select pg_temp.entries_match('a content edit with its vector rewrites the entry');

update payrail.provider_methods set urls = '{https://api.acme.example/v2/hotels}', docs_url = null where method = 'Hotel Search';
select pg_temp.entries_match('a URL-only edit rewrites the entry''s text');

update payrail.provider_methods set provider = 'Globex Corp', method = 'Weather Now' where method = 'Weather';
select pg_temp.entries_match('a rename rewrites the entry''s keys');

update payrail.provider_methods set embedding = '[0,0,1]', embedding_model = 'test-model',
  embedding_content_hash = content_hash
where method = 'ΟΔΟΣ';
select pg_temp.entries_match('a draft embedded: its entry names the model');
select pg_temp.states_match('has_current_vector: an embedded draft has one in both views');

update payrail.provider_methods set enabled = true where method = 'ΟΔΟΣ';
select pg_temp.entries_match('enabling a record rewrites its entry');

-- A vector-only write by the same model (sync of a changed record) changes nothing of the entry.
update payrail.provider_methods set embedding = '[0,2,0]' where method = 'Hotel Search';
select pg_temp.entries_match('a vector-only write by the same model keeps the entry');

-- The registry's model changes (as a model switch does it, vectors staged): the entries follow
-- their records' vectors, and whether a vector is current follows the registry's model.
insert into payrail.embedding_staging (provider_method_id, model, content_hash, embedding)
select id, 'new-model', content_hash, '[1,1]' from payrail.provider_methods where enabled;
select payrail.switch_embedding_model('new-model', 2);
select pg_temp.entries_match('after a model switch, the entries name the new model');
select pg_temp.states_match('has_current_vector after a model switch: the same in both views');

delete from payrail.provider_methods where method = 'Weather Now';
select pg_temp.entries_match('a deleted record''s entry goes with it');

-- Privileges.
select ok(
  has_table_privilege('payrail_operator', 'payrail.provider_method_list_entries', 'select')
  and has_table_privilege('payrail_embedder', 'payrail.provider_method_list_entry_states', 'select')
  and not has_table_privilege('payrail_operator', 'payrail.provider_method_list_entries', 'insert, update, delete, truncate')
  and not has_table_privilege('payrail_embedder', 'payrail.provider_method_list_entries', 'insert, update, delete, truncate'),
  'operators and the embedder read the list entries; neither writes them');
set local role payrail_agent;
select throws_ok('select * from payrail.provider_method_list_entries', '42501', null,
  'agents cannot read the list entries (drafts stay invisible to them)');
select throws_ok('select * from payrail.provider_method_list_entry_states', '42501', null,
  'agents cannot read the list entries'' states');
reset role;

-- An operator's own edit keeps the entry, through the security definer trigger.
set local role payrail_operator;
update payrail.provider_methods set guidance = 'Purpose: an operator''s edit.', enabled = false where method = 'ΟΔΟΣ';
reset role;
select pg_temp.entries_match('an operator''s edit rewrites the entry, which the operator cannot write');
select throws_ok('select payrail.tg_provider_methods__keep_list_entry()', '0A000', null,
  'the list entry trigger function cannot be called directly');

select * from finish();
rollback;
