-- Nothing on PostgreSQL: a claim there stays a transaction of two statements, the UPDATE and one
-- INSERT of the batch's `claimed` events. A row trigger would be a PL/pgSQL call per claimed row,
-- dearer than that one insert. SQLite's file has the reason for its trigger.
SELECT 1;
