-- When the current lease was taken (ms since the epoch), for the run-time metric.
ALTER TABLE tasks ADD COLUMN leased_at BIGINT NOT NULL DEFAULT 0;
