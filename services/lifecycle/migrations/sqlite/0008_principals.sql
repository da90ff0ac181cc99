-- Every package key's principal number (docs/decisions/principals.md): u32, >= 1, the smallest
-- free one when the key's row is first created, kept across generations, Updates, restarts and
-- failures, freed when Cleanup deletes the row. Workers run the key's hooks under an OS identity
-- derived from it, so no two stored keys may share one (the unique index).
ALTER TABLE packages ADD COLUMN principal BIGINT NOT NULL DEFAULT 0;
-- Keys stored before: 1, 2, ... in key order.
UPDATE packages SET principal = (SELECT COUNT(*) FROM packages AS p WHERE p.key <= packages.key);
CREATE UNIQUE INDEX IF NOT EXISTS packages_principal ON packages (principal);
