"""Cloud adapters. Each speaks one cloud's API and makes no decisions."""
