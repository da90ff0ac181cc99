-- Marks each queue's head (its task with the lowest seq) so Lease finds the ready heads through
-- one small index instead of walking every queue name. The store keeps exactly one head per
-- non-empty queue: Enqueue and every statement that removes tasks promote the new lowest seq of
-- the queues they touched (see store/heads.rs).
ALTER TABLE tasks ADD COLUMN is_head INTEGER NOT NULL DEFAULT 0;
UPDATE tasks SET is_head = 1 WHERE seq IN (SELECT MIN(seq) FROM tasks GROUP BY queue);
CREATE INDEX tasks_heads ON tasks (seq) WHERE is_head = 1;

-- No index may have a column a lease changes (lease_holder, lease_until, leased_at, fence):
-- on PostgreSQL an update that changes an indexed column writes a new entry into every index,
-- and Lease would wade through those dead entries. Cancelled tasks are few, so the reaper
-- filters them on lease_until without an index on it.
DROP INDEX tasks_cancelled;
CREATE INDEX tasks_cancelled ON tasks (seq) WHERE cancelled = 1;
