-- 1 when the loaded package's chart may read the global values (a nested package naming
-- `global` in its templates): a change of the `global` package's values re-runs it.
ALTER TABLE packages ADD COLUMN reads_global BIGINT NOT NULL DEFAULT 0;
