-- Task payloads as bytes (berth.queue.v1.Task.payload) and generic merge fields, instead of JSON
-- text. `format` says where a row's payload is:
--   1 (every row written before this migration): `payload`, JSON text, read through
--     `berth_proto::tasks::legacy` (store/legacy.rs) and written back as format 2 when it changes;
--   2: `body`, the payload's bytes, and `merge_fields`, the prost encoding of its
--     berth.queue.v1.Merge (empty: none); `payload` is empty.
ALTER TABLE tasks ADD COLUMN format BIGINT NOT NULL DEFAULT 1;
ALTER TABLE tasks ADD COLUMN body BYTEA NOT NULL DEFAULT ''::bytea;
ALTER TABLE tasks ADD COLUMN merge_fields BYTEA NOT NULL DEFAULT ''::bytea;
