"""The audit store: every decision, its inputs, commands and results, in Postgres."""
