"""The audit service: keeps every decision, its inputs, commands and results in Postgres."""
