-- 1 on the `global` package once its Run (the beforeAll hooks) succeeded and until the AfterAll
-- task (its afterAll hooks) is enqueued, which lifecycle does once the packages waiting for it
-- converged; the flag is cleared in the transaction that writes the task to the outbox.
ALTER TABLE packages ADD COLUMN after_all_due BIGINT NOT NULL DEFAULT 0;
