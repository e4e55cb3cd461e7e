-- Where a task may run and what a worker offers (see orchestrator_types::placement): a task's
-- requirements and a worker's offers as ",a,b," (sorted, escaped words). NULL requirements: any
-- worker may claim the task, which is every task made before this migration.
ALTER TABLE tasks ADD COLUMN requires TEXT;
ALTER TABLE workers ADD COLUMN offers TEXT;
