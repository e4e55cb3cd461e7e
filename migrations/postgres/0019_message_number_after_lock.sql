-- The number a fenced one-statement write gives its messages (fenced.rs) is read after the task
-- row's lock is granted, with a snapshot of its own. Read by the statement itself, it came from the
-- snapshot the statement started with: when the read-only calls of one reply ended together, each
-- call's write waited for the row lock held by the one before it and, once granted, still read the
-- last number as it was before that one committed. Its message insert then failed on
-- `task_messages_pkey`, the whole statement was rolled back, and the write was made again as a
-- transaction of six round trips, one after the other: about 2 ms per extra call of such a reply in
-- the agent benchmark.
--
-- PostgreSQL gives a VOLATILE function a new snapshot for each query it runs, and the statement
-- calls this one from the fence's row (`SELECT orchestrator_last_message_seq(...) FROM fence`), so
-- it runs once the fence's UPDATE holds the lock. Every writer of a task's messages takes that lock
-- first and keeps it until it commits, so the new snapshot holds every message written before.
CREATE FUNCTION orchestrator_last_message_seq(task BIGINT) RETURNS BIGINT
    LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN (SELECT COALESCE(MAX(seq), 0) FROM task_messages WHERE task_id = task);
END
$$;
