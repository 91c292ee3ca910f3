"""Durable state: the tables, the engine and its migrations, the audit log, retention, the
daemon's lease, the desired-state writes (submit, cancel, release, requeue) and the read
models the commands print. Imports only the core."""
