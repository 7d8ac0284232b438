-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- Bulk actions (the tables: db/schema/092-bulk_actions.sql): a transaction begins one, and every
-- record it then changes is written down as part of it.

create or replace function payrail._bulk_action_under_way()
returns bigint
language plpgsql
stable
security invoker
set search_path from current
as $$
declare
  v_setting text := pg_catalog.current_setting('payrail.bulk_action', true);
  v_id bigint;
begin
  if coalesce(v_setting, '') operator(pg_catalog.=) '' then
    return null;
  end if;
  if v_setting operator(pg_catalog.~) '^[0-9]{1,18}$' then
    select a.id into v_id from payrail.bulk_actions as a
    where a.id operator(pg_catalog.=) v_setting::bigint
      and a.transaction_id operator(pg_catalog.=) pg_catalog.pg_current_xact_id();
  end if;
  if v_id is null then
    raise exception using
      errcode = 'invalid_parameter_value',
      message = pg_catalog.format('payrail.bulk_action is set to "%s", which names no bulk action begun in this transaction', v_setting),
      hint = 'Begin one with payrail.begin_bulk_action(operation, selection), which sets it; never set it by hand.';
  end if;
  return v_id;
end
$$;

comment on function payrail._bulk_action_under_way() is
$$The bulk action this transaction began (payrail.begin_bulk_action), or NULL when it began none.

The setting payrail.bulk_action says which; it is believed only for a bulk action begun in this
very transaction, so a session that sets it by hand is refused (22023), never written down as
part of another operator's action.$$;

create or replace function payrail.tg_bulk_actions__begin()
returns trigger
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_undone payrail.bulk_actions;
begin
  if new.undoes is not null then
    select * into v_undone from payrail.bulk_actions as a where a.id operator(pg_catalog.=) new.undoes;
    if v_undone.operation operator(pg_catalog.=) 'undo' then
      raise exception using
        errcode = 'invalid_parameter_value',
        message = pg_catalog.format('bulk action %s is an undo itself (of bulk action %s); an undo is not undone', new.undoes, v_undone.undoes),
        hint = 'Enable, disable or delete the records again instead.';
    end if;
  end if;
  -- The records first, as every writer locks them (db apply's order, db/CONVENTIONS.md): this
  -- transaction is about to change them, and takes the bulk tables' locks after theirs.
  lock table payrail.provider_methods in row exclusive mode;
  new.with_golden_queries := coalesce(new.with_golden_queries, false);
  -- The clock, not the transaction's start, as the history stamps its entries.
  new.done_at := pg_catalog.clock_timestamp();
  new.done_by := payrail._author();
  new.done_by_session_user := session_user;
  new.transaction_id := pg_catalog.pg_current_xact_id();
  perform pg_catalog.set_config('payrail.bulk_action', new.id::text, true);
  return new;
end
$$;

comment on function payrail.tg_bulk_actions__begin() is
$$Begins the bulk action being inserted: stamps who, when and in which transaction (nobody sets them), and sets payrail.bulk_action.

The transaction's changes from then on are this action's (one begun before in the same
transaction ends). An undo is not undone (22023). Locks the records' table first, in the order
every writer takes the registry's locks.$$;

create or replace trigger tg_bulk_actions__begin
  before insert on payrail.bulk_actions
  for each row execute function payrail.tg_bulk_actions__begin();

create or replace function payrail.begin_bulk_action(
  p_operation text,
  p_selection text,
  p_undoes bigint default null,
  p_with_golden_queries boolean default false
)
returns bigint
language sql
volatile
security invoker
set search_path from current
as $$
  insert into payrail.bulk_actions (operation, selection, undoes, with_golden_queries)
  values (p_operation, p_selection, p_undoes, p_with_golden_queries)
  returning id
$$;

comment on function payrail.begin_bulk_action(text, text, bigint, boolean) is
$$Begins a bulk action in this transaction; returns its id (payrail.bulk_actions).

Every record the transaction then creates, changes (a new version) or deletes is written down as
part of it (payrail.bulk_action_records), so the history shows them as one action; who and when
are stamped (tg_bulk_actions__begin). p_operation: enable, disable, delete or undo (then p_undoes
names the action undone: once only, and never an undo). p_selection: what was asked, in words.
A second one in the same transaction ends the first:
begin;
select payrail.begin_bulk_action('disable', 'text "acme"');
update payrail.provider_methods set enabled = false where provider = 'Acme';
commit;$$;

create or replace function payrail.tg_provider_methods__record_bulk_action()
returns trigger
language plpgsql
volatile
-- Definer: no role writes payrail.bulk_action_records, so entries come from this trigger alone.
security definer
set search_path from current
as $$
declare
  v_action bigint := payrail._bulk_action_under_way();
begin
  if v_action is null or (tg_op operator(pg_catalog.=) 'UPDATE' and new.version operator(pg_catalog.=) old.version) then
    -- A vector-only write (sync) is not a new version.
    return null;
  end if;
  insert into payrail.bulk_action_records as r (bulk_action_id, record_id, operation, version_before, version_after)
  values (
    v_action,
    case when tg_op operator(pg_catalog.=) 'DELETE' then old.id else new.id end,
    pg_catalog.lower(tg_op),
    case when tg_op operator(pg_catalog.<>) 'INSERT' then old.version end,
    case when tg_op operator(pg_catalog.<>) 'DELETE' then new.version end)
  -- A record changed twice in one action: the version it found first, the one it left last.
  on conflict on constraint bulk_action_records_pkey do update
  set operation = case when excluded.operation operator(pg_catalog.=) 'delete' then 'delete' else r.operation end,
      version_after = excluded.version_after;
  return null;
end
$$;

comment on function payrail.tg_provider_methods__record_bulk_action() is
$$Writes down each record a bulk action creates, changes or deletes (payrail.bulk_action_records).

Runs only in a transaction that began a bulk action (payrail.begin_bulk_action sets
payrail.bulk_action; the trigger's WHEN reads it, so other writes pay nothing). Security definer:
the table is written by this trigger alone.$$;

create or replace trigger tg_provider_methods__record_bulk_action
  after insert or update or delete on payrail.provider_methods
  for each row
  when (pg_catalog.current_setting('payrail.bulk_action', true) operator(pg_catalog.<>) '')
  execute function payrail.tg_provider_methods__record_bulk_action();
