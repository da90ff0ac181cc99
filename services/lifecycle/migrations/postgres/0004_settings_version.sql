-- The version of the stored settings (UpdateRequest.settings_version; 0: the version of the
-- package version they were given for, resolved when it loads), and the loaded package's
-- settings conversions as JSON (`{"latest": N, "steps": [{"version": N, "expressions": [..]}]}`;
-- NULL until loaded), with which older settings are converted.
ALTER TABLE packages ADD COLUMN settings_version BIGINT NOT NULL DEFAULT 0;
ALTER TABLE packages ADD COLUMN conversions TEXT;
