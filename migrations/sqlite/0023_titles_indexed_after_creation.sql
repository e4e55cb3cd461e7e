-- A task's title reaches the title index (0007, 0022) after its creation, not in it: FTS5 wrote a
-- segment of its own for every task created alone, about 5 of the 13.5 pages such a creation wrote
-- to the WAL, and every page counts in the creation's synced commit, which is on the way from a
-- task's creation to its start. The rescuer's pass indexes the titles created since the last one
-- (`Store::index_titles`), and a search reads the titles not yet indexed as candidates too (read.rs
-- `title_filter`), so it finds the same tasks either way.
--
-- `tasks_title_upto` holds the largest task id whose title is in the index: every task at or
-- below it, none above. Ids only grow (AUTOINCREMENT), and the indexing runs in a write
-- transaction, so no task at or below the mark can be created after it is set.
CREATE TABLE tasks_title_upto (
    only INTEGER PRIMARY KEY CHECK (only = 1),
    id INTEGER NOT NULL
);
INSERT INTO tasks_title_upto (only, id) VALUES (1, IFNULL((SELECT MAX(id) FROM tasks), 0));
DROP TRIGGER tasks_title_insert;
-- A title not yet indexed has nothing in the index to delete or replace: the indexing reads the
-- title as it is then, or finds no task.
DROP TRIGGER tasks_title_delete;
CREATE TRIGGER tasks_title_delete AFTER DELETE ON tasks
WHEN old.id <= (SELECT id FROM tasks_title_upto)
BEGIN
    INSERT INTO tasks_title (tasks_title, rowid, title) VALUES ('delete', old.id, old.title);
END;
DROP TRIGGER tasks_title_update;
CREATE TRIGGER tasks_title_update AFTER UPDATE OF title ON tasks
WHEN old.id <= (SELECT id FROM tasks_title_upto)
BEGIN
    INSERT INTO tasks_title (tasks_title, rowid, title) VALUES ('delete', old.id, old.title);
    INSERT INTO tasks_title (rowid, title) VALUES (new.id, new.title);
END;
