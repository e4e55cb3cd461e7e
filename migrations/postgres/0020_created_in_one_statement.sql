-- Nothing on PostgreSQL. SQLite's file writes a task's `created` event by a trigger, so that a
-- creation is one statement there. Here a single creation is already one statement (its event's
-- insert in a WITH clause, create.rs), a row trigger would be a PL/pgSQL call per created task,
-- and a new row takes its change number from the column's default.
SELECT 1;
