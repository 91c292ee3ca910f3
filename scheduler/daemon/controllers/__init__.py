"""The daemon's controllers, one concern each, sharing one runtime (database, config, clouds).

`scheduler.daemon.reconcile.Reconciler` composes them into the passes APScheduler runs.
"""
