"""The daemon: the process and its signals, the reconcile passes and their controllers, the
wiring of providers, the checkpoint-store reads, logs, metrics and systemd."""
