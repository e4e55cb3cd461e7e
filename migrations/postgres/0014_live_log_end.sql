-- A live log can end without being replaced by a recorded log: a terminal's output is kept in its
-- live log (there is no other record of it), and a live log whose worker died is marked ended by
-- the rescuer (or by a cancel that finds no worker), so its followers stop waiting. `end_reason`
-- says why in words ("exited with status 0", "the worker running this stopped"); `exit_code` is
-- the program's, when it exited.
ALTER TABLE live_logs ADD COLUMN ended_at BIGINT;
ALTER TABLE live_logs ADD COLUMN end_reason TEXT;
ALTER TABLE live_logs ADD COLUMN exit_code BIGINT;
