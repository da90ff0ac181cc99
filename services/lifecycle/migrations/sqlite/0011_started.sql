-- 1 once this enable of the package ran its Startup (Synchronization and onStartup hooks) to
-- success; cleared when the scheduler enables it again or it starts over. While 0, a settings
-- Update queues Start (Startup before Run) rather than ApplySettings and Run, so onStartup is
-- never skipped (issue #31.3).
ALTER TABLE packages ADD COLUMN started INTEGER NOT NULL DEFAULT 0;
-- A package enabled and Running before this column existed ran its Startup.
UPDATE packages SET started = 1 WHERE enabled = 1 AND phase = 'Running';
