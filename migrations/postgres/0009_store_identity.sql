-- The store's identity: one row, made with the store, that tells its marks on places other stores
-- share from theirs. Staging and production working on one repository number their tasks and PR
-- attempts alike, so a pull request's hidden marker and branch carry this id, not only the numbers.
CREATE TABLE store_identity (
    id TEXT NOT NULL PRIMARY KEY,
    created_at BIGINT NOT NULL
);
-- 32 hex digits, like SQLite's; md5 of a random draw, the clock and the session, which needs no
-- extension and no particular server version.
INSERT INTO store_identity (id, created_at)
VALUES (
    md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text),
    (extract(epoch FROM clock_timestamp()) * 1000)::bigint
);
