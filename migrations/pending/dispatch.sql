-- dispatch: priority aging, tenant fairness, concurrency and rate limits, worker pools (docs/dispatch.md).
-- enqueue() gains concurrency_key.
DROP FUNCTION pgsched.enqueue(text, jsonb, text, timestamptz, integer, text, integer, text[], text);

ALTER TABLE pgsched.jobs
    ADD COLUMN concurrency_key text,
    ADD COLUMN dispatch_group  text        NOT NULL DEFAULT '',
    ADD COLUMN dispatch_rank   integer     NOT NULL DEFAULT 0,
    ADD COLUMN dispatch_at     timestamptz NOT NULL DEFAULT pg_catalog.now(),
    ADD CONSTRAINT jobs_concurrency_key_length CHECK (pg_catalog.length(concurrency_key) BETWEEN 1 AND 200);
-- Strict priority for every queue until one is configured: the old claim order.
UPDATE pgsched.jobs SET dispatch_rank = -priority, dispatch_at = run_at;
ALTER TABLE pgsched.job_history ADD COLUMN concurrency_key text;
ALTER TABLE pgsched.tasks ADD COLUMN labels text[];
ALTER TABLE pgsched.queues
    ADD COLUMN concurrency     integer,
    ADD COLUMN key_concurrency integer,
    ADD COLUMN rate            integer,
    ADD COLUMN key_rate        integer,
    ADD COLUMN rate_period     interval,
    ADD COLUMN aging           interval,
    ADD COLUMN tenant_fairness boolean NOT NULL DEFAULT false,
    ADD COLUMN labels          text[],
    ADD CONSTRAINT queues_concurrency_range CHECK (concurrency BETWEEN 1 AND 1000000 AND key_concurrency BETWEEN 1 AND 1000000),
    ADD CONSTRAINT queues_rate_range CHECK (rate BETWEEN 1 AND 10000 AND key_rate BETWEEN 1 AND 10000),
    ADD CONSTRAINT queues_rate_period CHECK (
        (rate_period IS NOT NULL) = (rate IS NOT NULL OR key_rate IS NOT NULL)
        AND rate_period BETWEEN interval '1 millisecond' AND interval '1 day'),
    ADD CONSTRAINT queues_aging_range CHECK (aging BETWEEN interval '1 millisecond' AND interval '1 day');

CREATE TABLE pgsched.rate_windows (
    queue    text          NOT NULL,
    rate_key text          NOT NULL,
    starts   timestamptz[] NOT NULL DEFAULT '{}',
    CONSTRAINT rate_windows_pkey PRIMARY KEY (queue, rate_key)
);
COMMENT ON TABLE pgsched.rate_windows IS
    'Start times within the last rate_period of each rate-limited queue ('''') and concurrency key; written by claims.';

DROP INDEX pgsched.jobs_claim_idx;
CREATE INDEX jobs_claim_idx ON pgsched.jobs (queue, dispatch_group, dispatch_rank, dispatch_at, id)
    WHERE state = 'available';
CREATE INDEX jobs_running_queue_idx ON pgsched.jobs (queue, concurrency_key)
    WHERE state = 'running';
CREATE INDEX jobs_labelled_idx ON pgsched.jobs (queue, labels)
    WHERE state = 'available' AND labels <> '{}';

-- Grants (the function files are applied before these lines).
REVOKE EXECUTE ON FUNCTION pgsched.enqueue, pgsched.configure_queue, pgsched.next_start, pgsched._claim_limited,
    pgsched._key_room, pgsched.tg_jobs__dispatch FROM PUBLIC;
REVOKE ALL ON pgsched.rate_windows FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgsched.enqueue TO pgsched_enqueue;
GRANT INSERT (concurrency_key) ON pgsched.jobs TO pgsched_enqueue;
GRANT EXECUTE ON FUNCTION pgsched.next_start TO pgsched_worker;
GRANT EXECUTE ON FUNCTION pgsched.configure_queue TO pgsched_admin;
