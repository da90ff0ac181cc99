-- Whether the current lease replaced an expired one (the task's previous holder vanished).
-- Set by the lease statement itself from the row's previous lease holder.
ALTER TABLE tasks ADD COLUMN redelivered BIGINT NOT NULL DEFAULT 0;
