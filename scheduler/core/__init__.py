"""The pure core: job spec, config values, catalog columns, placement, budgets, lifecycle,
price moves, the clock interface and the deadline policies. No database, no cloud calls, no
file or clock reads in the decisions: the daemon and the replay simulator call the same code."""
