-- Applies the registry's schema and functions in file-name order.
-- Usage: psql -X -v ON_ERROR_STOP=1 --single-transaction -f db/install.sql
-- `payrail-embedder db apply` runs the same files in the same order (a test checks this list).
-- The "drop constraint if exists" of a first install are expected; keep them quiet.
set client_min_messages = warning;
\ir schema/000-extensions.sql
\ir schema/005-roles.sql
\ir schema/010-schema.sql
\ir schema/015-text_rules.sql
\ir schema/020-embedding_model.sql
\ir schema/030-provider_methods.sql
\ir schema/035-provider_method_half_vectors.sql
\ir schema/040-embedding_staging.sql
\ir schema/050-provider_method_history.sql
\ir functions/100-provider_methods_triggers.sql
\ir functions/110-embedding_model.sql
\ir functions/120-provider_method_history.sql
\ir functions/130-provider_method_half_vectors.sql
\ir functions/140-save_provider_method.sql
\ir functions/200-search.sql
\ir functions/210-preview_search.sql
\ir functions/300-model_switch.sql
\ir functions/900-grants.sql
