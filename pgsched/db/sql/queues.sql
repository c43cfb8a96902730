-- Queue and task policies: configuring a queue, reading the configured ones, the registered tasks.

-- name: configure_queue
-- pgsched.configure_queue() with every setting named (pgsched.api.dispatch.configure_queue).
SELECT pgsched.configure_queue(
    %(name)s::text, concurrency => %(concurrency)s::integer, rate => %(rate)s::integer,
    rate_period => %(rate_period)s::interval, aging => %(aging)s::interval,
    tenant_fairness => %(tenant_fairness)s::boolean, key_concurrency => %(key_concurrency)s::integer,
    key_rate => %(key_rate)s::integer, labels => %(labels)s::text[], p_clear => %(clear)s::text[],
    tenant_weights => %(tenant_weights)s::jsonb) AS settings;

-- name: task_names
-- The registered task names (`pgsched enqueue` offers the close ones for a misspelt name).
SELECT name FROM pgsched.tasks ORDER BY name;
