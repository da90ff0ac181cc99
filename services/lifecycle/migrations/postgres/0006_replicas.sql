-- Lifecycle replicas over one database (see store.rs, "Replicas").
--
-- Every change of a package row is logged here by the trigger below, in commit order: writers
-- hold one transaction-scoped advisory lock, so sequence order is commit order. A replica
-- replays the entries past the last one it saw into its scheduler index before it schedules,
-- and a Watch on any replica hears of the change through NOTIFY.
CREATE TABLE IF NOT EXISTS package_changes (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key TEXT NOT NULL
);

-- Small facts every replica reads: the cluster's Kubernetes version (the scheduler's input),
-- and how far package_changes was pruned.
CREATE TABLE IF NOT EXISTS lifecycle_meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- A worker's answer to a validation that another replica waits for.
CREATE TABLE IF NOT EXISTS validation_answers (
    request_id TEXT PRIMARY KEY,
    package TEXT NOT NULL,
    answer TEXT NOT NULL,
    created_ms BIGINT NOT NULL
);

CREATE OR REPLACE FUNCTION berth_package_changed() RETURNS trigger AS $$
DECLARE
    changed TEXT;
BEGIN
    IF TG_OP = 'DELETE' THEN
        changed := OLD.key;
    ELSE
        changed := NEW.key;
    END IF;
    INSERT INTO package_changes (key) VALUES (changed);
    PERFORM pg_notify('berth_lifecycle_changes', changed);
    RETURN NULL;
END
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS packages_changed ON packages;
CREATE TRIGGER packages_changed AFTER INSERT OR UPDATE OR DELETE ON packages
    FOR EACH ROW EXECUTE FUNCTION berth_package_changed();
