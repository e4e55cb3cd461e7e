-- Nothing on PostgreSQL. SQLite's insert trigger now numbers only the new rows that carry no change
-- number; here a new row takes its number from the column's default, with no trigger.
SELECT 1;
