-- The registry's search path (010-schema.sql), so this file alone, rerun, leaves the same catalog.
do $$ begin perform pg_catalog.set_config('search_path', payrail._search_path(), false); end $$;

create or replace function payrail._is_storable_vector_length(p_embedding vector)
returns boolean
language plpgsql
immutable strict parallel safe
security invoker
set search_path from current
as $$
begin
  -- Search's exact distance sums in float32: a length beyond these overflows it or loses it in
  -- rounding, and the vector would rank by its scale. Models answer lengths near 1. The zero
  -- vector is the nonzero rules' business (provider_methods_embedding_nonzero_check).
  return vector_norm(p_embedding) operator(pg_catalog.=) 0
      or (vector_norm(p_embedding) operator(pg_catalog.>=) double precision '2.3283064365386963e-10'
          and vector_norm(p_embedding) operator(pg_catalog.<=) double precision '4294967296');
end
$$;

comment on function payrail._is_storable_vector_length(vector) is
$$True when a vector's length is between 2^-32 and 2^32 (or 0): the one statement of the limit on stored vectors.

provider_methods refuses other lengths (invalid_parameter_value, tg_provider_methods__keep_embedding_current)
and so does embedding_staging (embedding_staging_embedding_length_check).$$;
