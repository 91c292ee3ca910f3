"""spotwise scheduler: decisions and state (config, catalog, placement, budgets, the loop)."""
