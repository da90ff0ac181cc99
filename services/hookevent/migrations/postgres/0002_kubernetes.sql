-- Schedules may carry snapshots of the hook's kubernetes bindings.
ALTER TABLE schedule_bindings ADD COLUMN include_snapshots_from TEXT NOT NULL DEFAULT '[]';
ALTER TABLE schedule_bindings ADD COLUMN grp TEXT NOT NULL DEFAULT '';
-- The last SetBindings of each package with kubernetes bindings (protobuf-encoded), so a
-- restarted hookevent watches them again.
CREATE TABLE IF NOT EXISTS kubernetes_registrations (
    package TEXT PRIMARY KEY,
    request BYTEA NOT NULL
);
