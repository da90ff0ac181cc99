-- The front door a package was made through (docs/decisions/front-doors.md): NULL for the
-- gRPC API, else the berth.io resource its controller named (`Application default/web`).
-- Only that front door may change or remove the package. Set at insert, kept until Cleanup.
ALTER TABLE packages ADD COLUMN owner TEXT;
-- 1 while the package is suspended (`berth suspend`, a resource's `spec.suspend`): new
-- generations are refused and release does not repair its drift.
ALTER TABLE packages ADD COLUMN suspended BIGINT NOT NULL DEFAULT 0;
