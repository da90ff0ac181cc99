-- Schedule bindings registered by package Loads; kept so a restarted hookevent fires them again.
CREATE TABLE IF NOT EXISTS schedule_bindings (
    package TEXT NOT NULL,
    generation BIGINT NOT NULL,
    hook TEXT NOT NULL,
    binding TEXT NOT NULL,
    crontab TEXT NOT NULL,
    allow_failure BIGINT NOT NULL,
    queue TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS schedule_bindings_package ON schedule_bindings (package);
