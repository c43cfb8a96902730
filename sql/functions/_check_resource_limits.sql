-- _check_resource_limits
-- contract: refuses, with invalid_parameter_value naming the parameter, a
-- resource limit that enqueue_command() or enqueue_service() cannot take:
-- memory_limit (MiB) other than 0 (no limit) or 4 to 4194304 (4 TiB),
-- cpu_limit (CPUs) other than 0 (no limit) or 0.01 to 1024 (NaN and
-- infinity included). NULL (the install default) passes. Bounds as in
-- pgsched.config's config_resource_limits_range.
CREATE OR REPLACE FUNCTION pgsched._check_resource_limits(p_memory_limit integer, p_cpu_limit real)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_memory_limit <> 0 AND p_memory_limit NOT BETWEEN 4 AND 4194304 THEN
        RAISE EXCEPTION 'pgsched: memory_limit % MiB must be 0 (no limit) or 4 to 4194304 MiB (NULL: the default)',
                p_memory_limit
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'memory_limit';
    END IF;
    IF p_cpu_limit <> 0 AND NOT p_cpu_limit BETWEEN 0.01::real AND 1024 THEN
        RAISE EXCEPTION 'pgsched: cpu_limit % must be 0 (no limit) or 0.01 to 1024 CPUs (NULL: the default)', p_cpu_limit
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'cpu_limit';
    END IF;
END
$$;
