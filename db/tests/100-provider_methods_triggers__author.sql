-- Who a version, a history entry and a golden query name as their author (payrail._author): the
-- acting role, or the operating-system user the command line names, believed of a superuser login only.
begin;
select plan(9);

select payrail.set_embedding_model('test-model', 3);
insert into payrail.provider_methods (provider, method, guidance) values ('Acme', 'Geocode', 'Turn addresses into coordinates.');
create temporary table ids as select id from payrail.provider_methods;
grant select on ids to public;

create function pg_temp.saved_by()
returns text
language sql
as $$ select pm.saved_by from payrail.provider_methods as pm where pm.id = (select id from ids) $$;

create function pg_temp.edit(p_guidance text)
returns void
language sql
as $$ update payrail.provider_methods set guidance = p_guidance where id = (select id from ids) $$;

-- A superuser login (this session's) of the command line.
set local application_name = 'payrail-embedder (OS user ada)';
select pg_temp.edit('Addresses to coordinates.');
select is(pg_temp.saved_by(), 'ada (OS user, logged in as ' || session_user || ')',
  'author: a superuser login of the command line names the operating-system user, said as such');
select pg_temp.edit('Addresses to latitude and longitude.');
select is((select changed_by from payrail.provider_method_history order by id desc limit 1),
          'ada (OS user, logged in as ' || session_user || ')',
  'author: the history names who replaced a version the same way');
select is((select version_saved_by from payrail.provider_method_history order by id desc limit 1),
          'ada (OS user, logged in as ' || session_user || ')',
  'author: ... and keeps who saved the version it replaced');
insert into payrail.golden_queries (query) values ('where is this address');
select is((select added_by from payrail.golden_queries), 'ada (OS user, logged in as ' || session_user || ')',
  'author: a golden query names who added it the same way');

-- Names the rule does not believe, or does not need.
set local application_name = 'payrail-embedder (OS user ada';
select pg_temp.edit('Cut off.');
select is(pg_temp.saved_by(), session_user::text, 'author: a name cut short (application_name is 63 bytes at most) is not believed: the login');
set local application_name = 'psql (OS user ada)';
select pg_temp.edit('Another program.');
select is(pg_temp.saved_by(), session_user::text, 'author: another program''s application_name is not read');

set local application_name = 'payrail-embedder (OS user ada)';
set local role payrail_operator;
select pg_temp.edit('As an operator.');
select is(pg_temp.saved_by(), 'payrail_operator', 'author: SET ROLE names the role, whatever application_name claims');
reset role;

-- A login that is not a superuser is its own author: anyone may write any application_name.
create role author_test_login login in role payrail_operator;
set local session authorization author_test_login;
set local application_name = 'payrail-embedder (OS user mallory)';
select pg_temp.edit('Claimed by someone else.');
select is(pg_temp.saved_by(), 'author_test_login', 'author: a login that is not a superuser cannot claim another name');
select is((select changed_by from payrail.provider_method_history order by id desc limit 1), 'author_test_login',
  'author: ... in the history either (its definer trigger still reads the login)');
reset session authorization;

select * from finish();
rollback;
