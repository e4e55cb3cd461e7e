-- The title index (0007) again, without the size of each title: FTS5 keeps one row per indexed
-- row in its `docsize` table for ranking, and nothing here ranks (the search is MATCH alone, see
-- read.rs `title_filter`). That row was one more write, and one more page to the WAL, for every
-- task created. The index is built again from the titles: about 0.5 s per 200,000 tasks, once.
-- The triggers of 0007 write to the index by its name and stay as they are.
DROP TABLE tasks_title;
CREATE VIRTUAL TABLE tasks_title USING fts5 (
    title, content = 'tasks', content_rowid = 'id', tokenize = 'trigram case_sensitive 0',
    columnsize = 0
);
INSERT INTO tasks_title (tasks_title) VALUES ('rebuild');
