-- pgvector supplies the vector type and the exact cosine distance operator (<=>).
-- Installed wherever the server's default puts it (public, or "extensions" on some
-- managed services); 010-schema.sql finds it there. The one file that runs on the deployer's own
-- search path, so that a first install puts pgvector where the server's default does.
create extension if not exists vector;
