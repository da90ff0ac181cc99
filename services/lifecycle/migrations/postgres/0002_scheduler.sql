-- What the scheduler needs of each package, persisted so its decisions survive a restart.
-- The version package.yaml declares; NULL until the package (this version of it) is loaded.
ALTER TABLE packages ADD COLUMN loaded_version TEXT;
-- `weight` of package.yaml (0: unset).
ALTER TABLE packages ADD COLUMN weight BIGINT NOT NULL DEFAULT 0;
-- `requirements` of package.yaml as JSON (the scheduler's `Requirements`).
ALTER TABLE packages ADD COLUMN requirements TEXT NOT NULL DEFAULT '{}';
-- 1 once the scheduler enabled the package: the tasks after its Load were enqueued.
ALTER TABLE packages ADD COLUMN enabled BIGINT NOT NULL DEFAULT 0;
-- Before the scheduler, every loaded package went on at once: keep those enabled.
UPDATE packages SET enabled = 1 WHERE settings_schema IS NOT NULL;
