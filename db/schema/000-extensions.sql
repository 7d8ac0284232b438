-- pgvector supplies the vector type and the exact cosine distance operator (<=>).
-- Installed wherever the server's default puts it (public, or "extensions" on some
-- managed services); 010-schema.sql finds it there.
create extension if not exists vector;
