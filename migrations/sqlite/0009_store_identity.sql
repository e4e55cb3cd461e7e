-- The store's identity: one row, made with the store, that tells its marks on places other stores
-- share from theirs. Staging and production working on one repository number their tasks and PR
-- attempts alike, so a pull request's hidden marker and branch carry this id, not only the numbers.
CREATE TABLE store_identity (
    id TEXT NOT NULL PRIMARY KEY,
    created_at BIGINT NOT NULL
);
INSERT INTO store_identity (id, created_at)
VALUES (lower(hex(randomblob(16))), CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
