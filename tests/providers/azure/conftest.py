"""The Azure suites' fixtures (the loopback ARM and Retail Prices fakes), from tests/support."""

from tests.support.azure_fixtures import arm, make, prices, provider, rg  # noqa: F401  (fixtures)
