-- Nothing on SQLite. PostgreSQL's file adds the function its one-statement fenced writes read the
-- last message number with once the task row is locked. SQLite allows no write in a WITH clause,
-- so its fenced writes are transactions, whose read of the last number already follows the lock.
SELECT 1;
