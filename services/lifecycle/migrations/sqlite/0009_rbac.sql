-- The loaded package's `rbac:` section (JSON: {declared, rules: [PolicyRule...]}), from its
-- Loaded report: the release service builds the package's ServiceAccount bindings from it
-- (docs/decisions/package-identity.md). NULL: not loaded.
ALTER TABLE packages ADD COLUMN rbac TEXT;
