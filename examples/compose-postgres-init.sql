-- docker-compose.yml's PostgreSQL: a database per berth service, created when the volume is
-- new. Each service migrates its own schema at start (its own `_sqlx_migrations` history, which
-- is why they do not share one database).
CREATE DATABASE berth_queue;
CREATE DATABASE berth_lifecycle;
CREATE DATABASE berth_hookevent;
