"""The GCP suites' fixtures (the loopback fake, a provider on it), from tests/support."""

from tests.support.gcp_fixtures import _server, fake, provider  # noqa: F401  (fixtures)
