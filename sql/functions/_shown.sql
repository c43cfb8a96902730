-- _shown
-- contract: a value quoted for an error message (NULL as NULL), cut to its
-- first 60 characters so a megabyte of input does not become the message.
CREATE OR REPLACE FUNCTION pgsched._shown(p_value text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE WHEN pg_catalog.length(p_value) > 60
            THEN pg_catalog.quote_nullable(pg_catalog.left(p_value, 60)) || '...'
            ELSE pg_catalog.quote_nullable(p_value) END
$$;
