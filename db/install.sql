-- Applies the registry's schema and functions in file-name order, with the one-time upgrade steps
-- (db/upgrades/, each run once) right after the bookkeeping they need (schema/012-deployments.sql).
-- Usage: psql -X -v ON_ERROR_STOP=1 --single-transaction -f db/install.sql
-- `payrail-embedder db apply` runs the same files in the same order (a test checks this list); it
-- also skips a registry that is current and keeps searches going (db/CONVENTIONS.md, "Deploys").
-- The "drop constraint if exists" of a first install are expected; keep them quiet.
set client_min_messages = warning;
\ir schema/000-extensions.sql
\ir schema/005-roles.sql
\ir schema/010-schema.sql
\ir schema/011-ddl_helpers.sql
\ir schema/012-deployments.sql
\ir upgrades/001-provider_methods_version.sql
\ir upgrades/002-provider_method_history_version.sql
\ir upgrades/003-enabled_name_indexes.sql
\ir upgrades/004-stamp_version_trigger.sql
\ir upgrades/005-name_path_matches_counted_draft.sql
\ir upgrades/006-saved_by.sql
\ir upgrades/007-lookalikes.sql
\ir upgrades/008-delete_provider_method_golden_queries.sql
\ir upgrades/009-run_upgrade_step.sql
\ir upgrades/010-agent_logins.sql
\ir upgrades/011-golden_queries_language.sql
\ir upgrades/012-drop_plan_provider_method_changes.sql
\ir schema/015-text_rules.sql
\ir schema/016-unicode_security.sql
\ir schema/017-vector_rules.sql
\ir schema/018-lookalikes.sql
\ir schema/020-embedding_model.sql
\ir schema/030-provider_methods.sql
\ir schema/035-provider_method_half_vectors.sql
\ir schema/036-provider_method_list_entries.sql
\ir schema/040-embedding_staging.sql
\ir schema/050-provider_method_history.sql
\ir schema/060-rules.sql
\ir schema/070-provider_method_states.sql
\ir schema/080-golden_queries.sql
\ir schema/082-golden_query_embeddings.sql
\ir schema/090-agent_logins.sql
\ir schema/092-bulk_actions.sql
\ir schema/094-provider_method_change.sql
\ir functions/100-provider_methods_triggers.sql
\ir functions/104-lookalikes.sql
\ir functions/110-embedding_model.sql
\ir functions/120-provider_method_history.sql
\ir functions/130-provider_method_half_vectors.sql
\ir functions/132-provider_method_list_entries.sql
\ir functions/134-list_provider_methods.sql
\ir functions/140-save_provider_method.sql
\ir functions/142-delete_provider_method.sql
\ir functions/146-save_provider_methods.sql
\ir functions/150-check_provider_method.sql
\ir functions/160-golden_queries.sql
\ir functions/170-bulk_actions.sql
\ir functions/180-template_advice.sql
\ir functions/200-search.sql
\ir functions/210-preview_search.sql
\ir functions/300-model_switch.sql
\ir functions/900-grants.sql
\ir functions/999-record_deployment.sql
