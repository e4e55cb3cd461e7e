-- Daily token budgets: the tasks of one key (an automation, a trigger rule) spend at most so many
-- tokens in a day (UTC); past it their new attempts wait for the next day. The spending is read
-- from the conversations' usage, of the key's tasks not finished before the day began.
ALTER TABLE tasks ADD COLUMN budget_key TEXT;
CREATE INDEX tasks_by_budget ON tasks (budget_key, finished_at) WHERE budget_key IS NOT NULL;
