"""The fixtures the cloud daemon suites stand on: moto and the fake Price List (AWS), the
loopback GCP fake, the loopback ARM and Retail Prices fakes (Azure)."""

from tests.support.aws_fixtures import (  # noqa: F401  (fixtures, found by name)
    _fast_retries,
    aws_env,
    moto,
    moto_url,
    pricing,
    pricing_server,
)
from tests.support.azure_fixtures import arm, prices, rg  # noqa: F401
from tests.support.gcp_fixtures import _server, fake  # noqa: F401
