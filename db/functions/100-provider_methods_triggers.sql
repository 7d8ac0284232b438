-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail._acting_role()
returns text
language sql
stable
security invoker
set search_path from current
-- In a security-definer function current_user is its owner; the role setting is what SET ROLE
-- chose, which only a member of that role can set ('none': the login itself).
return case when pg_catalog.current_setting('role') operator(pg_catalog.<>) 'none' then pg_catalog.current_setting('role')
            else session_user end;

comment on function payrail._acting_role() is
$$The role a change is made as: the role set with SET ROLE, else the login (session_user); also inside security-definer functions.$$;

create or replace function payrail._author()
returns text
language sql
stable
security invoker
set search_path from current
-- The command line names the operating-system user it runs as in its application_name
-- ("payrail-embedder (OS user ada)", postgres/connection.py). Anyone can name anyone there, so it
-- is believed of a superuser login alone, which may write anything anyway: the person behind a
-- shared superuser. Any other login is a person's own, or SET ROLE named the role. It runs for
-- every row a write stamps, so the claim is read once and no catalog is read: with no SET ROLE,
-- is_superuser is the login's own (a security-definer function does not change it).
return coalesce(
  case when pg_catalog.current_setting('role') operator(pg_catalog.=) 'none'
            and pg_catalog.current_setting('is_superuser') operator(pg_catalog.=) 'on'
       then pg_catalog.substring(pg_catalog.current_setting('application_name'), '^payrail-embedder \(OS user ([^()]+)\)$')
            operator(pg_catalog.||) ' (OS user, logged in as ' operator(pg_catalog.||) session_user operator(pg_catalog.||) ')'
  end,
  payrail._acting_role());

comment on function payrail._author() is
$$Who makes a change, as versions, the history and golden queries record it: the acting role
(payrail._acting_role), or, for a superuser login of the command line, the operating-system user
it names: "ada (OS user, logged in as postgres)".$$;

create or replace function payrail.tg_provider_methods__keep_embedding_current()
returns trigger
language plpgsql
volatile
security invoker
set search_path from current
as $$
declare
  v_model payrail.embedding_model;
  v_content_hash bytea := payrail._content_hash(new.provider, new.method, new.guidance);
begin
  if new.embedding is null then
    return new;
  end if;

  -- "is distinct from", spelt out with qualified operators (db/CONVENTIONS.md).
  if tg_op operator(pg_catalog.=) 'INSERT'
     or coalesce(vector_ne(new.embedding, old.embedding), old.embedding is null)
     or coalesce(new.embedding_model operator(pg_catalog.<>) old.embedding_model,
                 (new.embedding_model is null) operator(pg_catalog.<>) (old.embedding_model is null))
     or coalesce(new.embedding_content_hash operator(pg_catalog.<>) old.embedding_content_hash,
                 (new.embedding_content_hash is null) operator(pg_catalog.<>) (old.embedding_content_hash is null)) then
    -- A fresh vector: it must come from the registry's model.
    -- Whether it was made from this content is provider_methods_embedding_content_check's job.
    -- "for share" waits for a model switch in progress (switch_embedding_model), then sees its model.
    select * into v_model from payrail.embedding_model for share;
    if v_model is null or coalesce(new.embedding_model operator(pg_catalog.<>) v_model.name, true)
       or vector_dims(new.embedding) operator(pg_catalog.<>) v_model.dimensions then
      raise exception using
        errcode = 'PYE02',
        message = pg_catalog.format(
          'embedding for provider method "%s / %s" is from model %s (%s dimensions), not the registry''s model %s',
          new.provider, new.method, coalesce(new.embedding_model, 'unknown'), vector_dims(new.embedding),
          coalesce(pg_catalog.format('%s (%s dimensions)', v_model.name, v_model.dimensions), '(none set)')),
        hint = 'Embed with the model payrail.get_embedding_model() returns, or switch the registry''s model first.';
    end if;
    if not payrail._is_storable_vector_length(new.embedding) then
      -- The column names the vector, so the write path can tell the model's answer was refused.
      raise exception using
        errcode = 'invalid_parameter_value',
        schema = 'payrail',
        table = 'provider_methods',
        column = 'embedding',
        message = pg_catalog.format(
          'embedding for provider method "%s / %s" has length %s; a stored vector''s length must be between 2^-32 and 2^32',
          new.provider, new.method, vector_norm(new.embedding)),
        hint = 'Store the vector the model returned, or scale it to unit length with l2_normalize(): only its direction counts.';
    end if;
    return new;
  end if;

  if coalesce(new.embedding_content_hash operator(pg_catalog.<>) v_content_hash,
              (new.embedding_content_hash is null) operator(pg_catalog.<>) (v_content_hash is null)) then
    -- Provider, method or guidance changed and no fresh vector came with the edit.
    if new.enabled then
      raise exception using
        errcode = 'check_violation',
        constraint = 'provider_methods_enabled_needs_embedding_check',
        schema = 'payrail',
        table = 'provider_methods',
        message = pg_catalog.format(
          'provider method "%s / %s" is enabled, so a change to its provider, method or guidance needs a fresh embedding',
          old.provider, old.method),
        detail = 'An enabled record must always carry an embedding of its current provider, method and guidance.',
        hint = 'Edit it with `payrail-embedder import`, which embeds before saving; or set enabled = false in the same '
               'UPDATE, run `payrail-embedder sync`, then set enabled = true.';
    end if;
    -- A draft simply loses its stale vector; sync embeds it again.
    new.embedding := null;
    new.embedding_model := null;
    new.embedding_content_hash := null;
  end if;
  return new;
end
$$;

comment on function payrail.tg_provider_methods__keep_embedding_current() is
$$Keeps provider_methods.embedding current: an enabled record's vector is always of its current content, by the registry's model.

A fresh vector must be from the registry's model (PYE02). A content edit without one drops a
draft's stale vector and is refused for an enabled record (check_violation). URL-only edits and
enabling or disabling keep the vector.$$;

create or replace trigger tg_provider_methods__keep_embedding_current
  before insert or update on payrail.provider_methods
  for each row execute function payrail.tg_provider_methods__keep_embedding_current();

create or replace function payrail.tg_provider_methods__canonicalize_names()
returns trigger
language plpgsql
volatile
security invoker
set search_path from current
as $$
begin
  -- Before the vector rules (triggers fire in name order): the content hash covers stored text.
  new.provider := payrail._canonical_name(new.provider);
  new.method := payrail._canonical_name(new.method);
  return new;
end
$$;

comment on function payrail.tg_provider_methods__canonicalize_names() is
$$Stores provider and method trimmed and in Unicode NFC (payrail._canonical_name).$$;

create or replace trigger tg_provider_methods__canonicalize_names
  before insert or update of provider, method on payrail.provider_methods
  for each row execute function payrail.tg_provider_methods__canonicalize_names();

create or replace function payrail.tg_provider_methods__stamp_version()
returns trigger
language plpgsql
volatile
security invoker
set search_path from current
as $$
begin
  if tg_op operator(pg_catalog.=) 'INSERT' then
    new.version := 1;
    -- The clock, not the transaction's start: each record of a long import shows its own time.
    new.created_at := pg_catalog.clock_timestamp();
    new.updated_at := new.created_at;
    new.saved_by := payrail._author();
  -- "is distinct from", spelt out with qualified operators (db/CONVENTIONS.md); docs_url alone may be NULL.
  elsif new.provider operator(pg_catalog.<>) old.provider or new.method operator(pg_catalog.<>) old.method
        or new.urls operator(pg_catalog.<>) old.urls or new.guidance operator(pg_catalog.<>) old.guidance
        or new.enabled operator(pg_catalog.<>) old.enabled or new.mixed_scripts operator(pg_catalog.<>) old.mixed_scripts
        or new.source operator(pg_catalog.<>) old.source
        or coalesce(new.docs_url operator(pg_catalog.<>) old.docs_url, (new.docs_url is null) operator(pg_catalog.<>) (old.docs_url is null)) then
    new.version := old.version operator(pg_catalog.+) 1;
    new.created_at := old.created_at;
    new.updated_at := pg_catalog.clock_timestamp();
    new.saved_by := payrail._author();
  else
    -- A vector-only write (sync, model switch) is not a new version.
    new.version := old.version;
    new.created_at := old.created_at;
    new.updated_at := old.updated_at;
    new.saved_by := old.saved_by;
  end if;
  return new;
end
$$;

comment on function payrail.tg_provider_methods__stamp_version() is
$$Numbers the versions of a record and stamps when each was saved.

A change of a public field, enabled, mixed_scripts or source is a new version (version + 1, updated_at the clock
time, saved_by its author, payrail._author); a vector-only write keeps all three. Nobody sets version,
created_at, updated_at or saved_by by hand.$$;

create or replace trigger tg_provider_methods__stamp_version
  before insert or update on payrail.provider_methods
  for each row execute function payrail.tg_provider_methods__stamp_version();
