-- The repositories PackageRepository resources define (berth's controller puts and deletes
-- them; docs/decisions/package-repositories.md). kind: directory, archive_url or oci; location:
-- the directory, URL or oci:// reference. Registry credentials are kept here for workers only
-- (never in Dump or Get).
CREATE TABLE repositories (
    name TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    location TEXT NOT NULL,
    plain_http INTEGER NOT NULL DEFAULT 0,
    username TEXT,
    password TEXT
);
