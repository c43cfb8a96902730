-- The owner's insert trigger keys on the row (attempt named or not), not on a session setting.
ALTER TABLE pgsched.jobs ALTER COLUMN attempt DROP DEFAULT;
