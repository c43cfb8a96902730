-- _check_command_task
-- contract: raises insufficient_privilege when p_task is pgsched.command, the
-- task of command jobs: those enter only through enqueue_command() (granted
-- by pgsched_command), never through enqueue(), enqueue_many(), a plain
-- INSERT or a schedule, whatever the caller's other grants. p_where names
-- the path that was refused (with its batch row, if any) in the message.
-- The owner's own redrive (retry()) re-inserts an existing command job and
-- does not come here.
CREATE OR REPLACE FUNCTION pgsched._check_command_task(p_task text, p_where text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pgsched, pg_temp
AS $$
BEGIN
    IF p_task = 'pgsched.command' THEN
        RAISE EXCEPTION 'pgsched: %task pgsched.command is reserved for command jobs',
                CASE WHEN p_where IS NULL THEN '' ELSE p_where || ': ' END
            USING ERRCODE = 'insufficient_privilege', COLUMN = 'task', SCHEMA = 'pgsched', TABLE = 'jobs',
                  HINT = 'Enqueue commands with pgsched.enqueue_command(), which needs the role pgsched_command.';
    END IF;
END
$$;
