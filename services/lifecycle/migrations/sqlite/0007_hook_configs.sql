-- What the hooks of the loaded package answered to their config queries (JSON: an array of
-- {path, batch, output}), as the Load's worker discovered them: other workers build the hooks
-- from it instead of running every hook with --config again. NULL: not loaded, or too large
-- to keep (workers then discover for themselves).
ALTER TABLE packages ADD COLUMN hook_configs TEXT;
