-- The tasks that worked on one pull request, so that its rounds can be listed together: the task
-- that opened it (recorded when its first round starts) and every task made to work on it
-- (recorded with the task). `pull` is `owner/name#number`, the repository in lower case.
CREATE TABLE pull_tasks (
    pull TEXT NOT NULL,
    task_id BIGINT NOT NULL,
    role TEXT NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (pull, task_id)
);
CREATE INDEX pull_tasks_by_task ON pull_tasks (task_id);
