-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- Bulk actions: one operator's action over many records (`enable`, `disable`, `delete` of the
-- command line, the backoffice's bulk buttons, an undo of one of them), so the history shows the
-- versions it made as one action and the action can be undone. Begun by
-- payrail.begin_bulk_action, the only writer of this table; the records it touches are written
-- to payrail.bulk_action_records by the trigger tg_provider_methods__record_bulk_action alone
-- (db/functions/170-bulk_actions.sql): who did what is the database's own account.
create table if not exists payrail.bulk_actions (
  id bigint generated always as identity,
  operation text not null,
  -- What was asked, in words, as the faces describe their selection: 'text "acme", state draft'.
  selection text not null,
  -- The bulk action an undo undoes (an undo's only).
  undoes bigint
    constraint bulk_actions_undoes_fkey references payrail.bulk_actions (id),
  -- A delete that took the records out of the golden queries naming them (which no undo brings back).
  with_golden_queries boolean not null default false,
  done_at timestamptz not null,
  done_by text not null,
  done_by_session_user text not null,
  -- The transaction that began it: the trigger believes payrail.bulk_action in that transaction only.
  transaction_id xid8 not null,
  constraint bulk_actions_pkey primary key (id),
  -- An action is undone once at most.
  constraint bulk_actions_undoes_key unique (undoes)
);

select payrail._ensure_check_constraint('payrail.bulk_actions', 'bulk_actions_operation_check',
  $$check (operation operator(pg_catalog.=) any (array['enable', 'disable', 'delete', 'undo']))$$);
select payrail._ensure_check_constraint('payrail.bulk_actions', 'bulk_actions_undoes_check',
  $$check ((undoes is null) operator(pg_catalog.=) (operation operator(pg_catalog.<>) 'undo'))$$);
select payrail._ensure_check_constraint('payrail.bulk_actions', 'bulk_actions_selection_check',
  $$check (pg_catalog.char_length(selection) operator(pg_catalog.<=) 2000)$$);

-- "Your last bulk action": the latest of one author.
create index if not exists bulk_actions_done_by_idx on payrail.bulk_actions (done_by, id);

-- Every record a bulk action changed: the version it found and the version it left.
create table if not exists payrail.bulk_action_records (
  bulk_action_id bigint not null
    constraint bulk_action_records_bulk_action_id_fkey references payrail.bulk_actions (id),
  -- Not a foreign key: the record may be deleted (by this action or since).
  record_id bigint not null,
  operation text not null,
  -- NULL for a record the action created.
  version_before integer,
  -- NULL for a record the action deleted.
  version_after integer,
  constraint bulk_action_records_pkey primary key (bulk_action_id, record_id)
);

select payrail._ensure_check_constraint('payrail.bulk_action_records', 'bulk_action_records_operation_check',
  $$check (operation operator(pg_catalog.=) any (array['insert', 'update', 'delete']))$$);

-- A record's versions and the bulk actions that made or replaced them (history, the record page).
create index if not exists bulk_action_records_record_id_idx on payrail.bulk_action_records (record_id);

comment on table payrail.bulk_actions is
$$Bulk actions: one operator's action over many records, and undos of them.

Begun by payrail.begin_bulk_action (no role writes this table directly), which stamps who and
when; the records each changed are payrail.bulk_action_records. `payrail-embedder enable`,
`disable`, `delete` and `undo`, and the backoffice's bulk buttons, make one per action.$$;
comment on column payrail.bulk_actions.id is 'Bulk action id: what the history and `payrail-embedder undo` name.';
comment on column payrail.bulk_actions.operation is 'enable, disable, delete, or undo (of the bulk action undoes names).';
comment on column payrail.bulk_actions.selection is 'What the operator asked for, in words: the records named, or the filter (text, state), or every record.';
comment on column payrail.bulk_actions.undoes is 'For an undo: the bulk action it undid. Unique: an action is undone once.';
comment on column payrail.bulk_actions.with_golden_queries is 'For a delete: the records left the golden queries naming them, and queries naming no other went (an undo restores no golden query).';
comment on column payrail.bulk_actions.done_at is 'When it began (the clock time).';
comment on column payrail.bulk_actions.done_by is
  'Who did it (payrail._author): the role set with SET ROLE, else the login, or the operating-system user the command line names for a superuser login.';
comment on column payrail.bulk_actions.done_by_session_user is 'Login role of that session (session_user).';
comment on column payrail.bulk_actions.transaction_id is 'The transaction that began it (pg_current_xact_id()); records are linked to it in that transaction only.';

comment on table payrail.bulk_action_records is
$$The records each bulk action changed: one row per record, with the version it found and the one it left.

Written by the trigger tg_provider_methods__record_bulk_action alone (no role writes it) for every
new version, delete and insert of a transaction that began a bulk action. The history entry of a
version the action replaced is payrail.provider_method_history's (record_id, version_before).$$;
comment on column payrail.bulk_action_records.bulk_action_id is 'The bulk action (payrail.bulk_actions.id).';
comment on column payrail.bulk_action_records.record_id is 'The record (payrail.provider_methods.id); it may have been deleted since.';
comment on column payrail.bulk_action_records.operation is 'insert (created, e.g. by the undo of a delete), update (a new version) or delete.';
comment on column payrail.bulk_action_records.version_before is 'The version the action found (its history entry keeps it); NULL for a record it created.';
comment on column payrail.bulk_action_records.version_after is 'The version the action left; NULL for a record it deleted.';
