"""The cost report links each job to its checkpoint store, on whichever cloud it is."""

from __future__ import annotations

from scheduler.cli.report_html import _store
from scheduler.state.report import store_url


def test_each_store_links_where_a_person_can_look_at_it() -> None:
    assert store_url("s3://bkt/ckpt/j-1") == (
        "https://s3.console.aws.amazon.com/s3/buckets/bkt?prefix=ckpt/j-1/"
    )
    assert store_url("gs://bkt/ckpt/j-1") == (
        "https://console.cloud.google.com/storage/browser/bkt/ckpt/j-1/"
    )
    assert store_url("az://ckpt@acct/runs/j-1") == (
        "https://acct.blob.core.windows.net/ckpt/runs/j-1/"
    )
    assert store_url("/srv/ckpt/j 1/") == "file:///srv/ckpt/j%201"
    assert store_url("az://ckpt/runs") is None  # the account is not in the URI
    html = _store("gs://bkt/a<b")
    assert html.startswith('<a href="https://console.cloud.google.com/') and "a&lt;b" in html
