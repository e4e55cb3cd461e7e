-- Nothing on SQLite. PostgreSQL's file moves title search off the `tasks` table and drops the
-- events' foreign key, two costs of each claim and end there. Here the title index is already a
-- table of its own (`tasks_title`, 0007), written when a task is created and not when it is claimed
-- or ended, and a foreign key is checked in the process by a lookup of the primary key, not by a
-- query of its own per row.
SELECT 1;
