-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

-- The first pass of semantic search (payrail._search): every enabled record's embedding, scaled
-- to unit length and rounded to half precision, in a table of its own. A scan of it reads 2 bytes
-- per dimension instead of the row's 4, skips the record's text, and sees no draft; the error of
-- the rounding is bounded (payrail._half_precision_error_bound), so the second pass re-ranks by
-- exact distance every record the first could have misplaced, and search stays exact.
-- halfvec came with pgvector 0.7. On an older pgvector this table is not created and search
-- makes its first pass over the exact vectors instead: same answers, 1.3-1.9x slower.
-- tg_provider_methods__keep_half_vector (db/functions) keeps the rows in step with
-- provider_methods; nobody else writes them.
do $$
begin
  if pg_catalog.to_regtype('halfvec') is null then
    return;
  end if;

  create table if not exists payrail.provider_method_half_vectors (
    provider_method_id bigint primary key
      constraint provider_method_half_vectors_provider_method_id_fkey
      references payrail.provider_methods (id) on delete cascade,
    unit_embedding halfvec not null
  );

  -- In the table's own pages, uncompressed: a vector over 2 kB (1,024 dimensions and up) would
  -- otherwise cost a TOAST lookup per row on every search (pgvector's default storage), or a
  -- compression attempt per write and a decompression per read where one succeeds (MAIN alone).
  -- Rows past a page (about 4,070 dimensions) still go to TOAST.
  perform payrail._ensure_storage('payrail.provider_method_half_vectors', 'unit_embedding', 'main');
  alter table payrail.provider_method_half_vectors set (toast_tuple_target = 8160);

  comment on table payrail.provider_method_half_vectors is
$c$The first pass of semantic search: each enabled record's embedding at unit length, in half precision.

One row per enabled record of payrail.provider_methods, written only by the trigger
tg_provider_methods__keep_half_vector; `payrail-embedder db apply --force` rewrites any row that differs
(payrail._repair_half_vectors), as does an apply that changes how the rows are derived.
Search ranks these by inner product, then re-ranks by exact cosine distance every record within
the rounding's error bound of the 3rd (payrail._search), so answers are exact.$c$;
  comment on column payrail.provider_method_half_vectors.provider_method_id is 'The record (payrail.provider_methods.id); enabled.';
  comment on column payrail.provider_method_half_vectors.unit_embedding is
    'l2_normalize(provider_methods.embedding)::halfvec: its inner product with a unit query is about the cosine similarity.';
end
$$;
