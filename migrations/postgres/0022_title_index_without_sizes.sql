-- Nothing on PostgreSQL. SQLite's title index is built again without the column sizes it kept for
-- ranking, which nothing reads.
SELECT 1;
