-- Nothing on PostgreSQL. SQLite's title index is written after a task's creation rather than in
-- it.
SELECT 1;
