"""The lab: the replay simulator over real spot traces, the benchmark data and the
benchmarks, and the demo. Nothing here runs in the daemon."""
