"""The API server: the CLI's operations over HTTP for people who are not on the daemon's host.

It holds no state of its own (any number of replicas may serve one database): every request
reads the database, and the writes are the CLI's own desired-state writes, so the daemon
keeps reconciling from the database as before.
"""
