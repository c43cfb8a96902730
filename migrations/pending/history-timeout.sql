-- A finished job keeps its own run limit, so a redrive (retry) gives it back.
ALTER TABLE pgsched.job_history ADD COLUMN timeout interval;
