"""`Capabilities.label` (one regex over the whole value) rewrites exactly as the rule says:
each character the cloud does not allow becomes "_", then the value is cut to length."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from providers.aws.provider import CAPABILITIES as AWS
from providers.azure.provider import CAPABILITIES as AZURE
from providers.base import Capabilities
from providers.gcp.provider import CAPABILITIES as GCP

RULES = [AWS, AZURE, GCP, Capabilities()]


def _by_character(c: Capabilities, value: str) -> str:
    if c.lowercase_labels:
        value = value.lower()
    allowed = re.compile(c.label_pattern)
    return "".join(x if allowed.fullmatch(x) else "_" for x in value)[: c.label_max_length]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(RULES), st.text(max_size=80))
def test_label_matches_the_per_character_rule(caps, value):
    assert caps.label(value) == _by_character(caps, value)


def test_label_keeps_an_allowed_value_and_rewrites_a_bad_one():
    assert GCP.label("j-0ABC_x") == "j-0abc_x"
    assert GCP.label("team/ml ✓") == "team_ml__"
