"""The AWS suites' fixtures (moto, the fake Price List, sessions), from tests/support."""

from tests.support.aws_fixtures import (  # noqa: F401  (fixtures, found by name)
    _fast_retries,
    _loader,
    aws_env,
    clock,
    make_provider,
    moto,
    moto_url,
    placement_groups,
    placement_scores,
    pricing,
    pricing_server,
    session,
)
