"""The vocabulary every part shares: jobs as handlers see them, tasks, run outcomes, cron expressions."""
