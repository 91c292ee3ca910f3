"""Spot interruption warnings and rebalance recommendations from an SQS queue fed by
EventBridge (as Karpenter does for warnings).

EC2 publishes "EC2 Spot Instance Interruption Warning" about two minutes before it takes a
spot instance back. An EventBridge rule can forward it to SQS; reading the queue tells the
daemon earlier than describe_instances would (the instance is still "running" until then).
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from providers.aws.ttl import NOTICE_KEEP

log = logging.getLogger("spotwise.providers.aws")

WARNING = "EC2 Spot Instance Interruption Warning"
# Often minutes before the warning, not always followed by one (EC2 User Guide, "EC2 instance
# rebalance recommendations"; EventBridge detail-type as in its "Example" event).
REBALANCE = "EC2 Instance Rebalance Recommendation"
_MAX_BATCHES = 10  # per poll: at most 100 messages, so a flooded queue cannot stall a call


def queue_region(url: str) -> str | None:
    m = re.search(r"sqs[.-]([a-z]{2}(?:-gov)?-[a-z]+-\d+)\.amazonaws", url) or re.search(
        r"//([a-z]{2}(?:-gov)?-[a-z]+-\d+)\.queue\.amazonaws", url
    )
    return m.group(1) if m else None


def parse_message(body: str) -> tuple[str, datetime] | None:
    """(instance id, warning time) from an EventBridge event, raw or wrapped by SNS."""
    got = parse_event(body)
    return (got[1], got[2]) if got is not None and got[0] == WARNING else None


def parse_event(body: str) -> tuple[str, str, datetime] | None:
    """(detail-type, instance id, time) of an interruption warning or a rebalance
    recommendation, raw or wrapped by SNS; None for anything else."""
    try:
        event: Any = json.loads(body)
        if isinstance(event, dict) and event.get("Type") == "Notification" and "Message" in event:
            event = json.loads(event["Message"])
    except (TypeError, ValueError):
        return None
    if not isinstance(event, dict) or event.get("detail-type") not in (WARNING, REBALANCE):
        return None
    iid = (event.get("detail") or {}).get("instance-id")
    when = event.get("time")
    if not iid or not when:
        return None
    try:
        at = datetime.fromisoformat(str(when).replace("Z", "+00:00"))
    except ValueError:
        return None
    return str(event["detail-type"]), str(iid), at


class InterruptionNotices:
    """Drains each region's queue and remembers which instances have been warned, and when.
    EventBridge delivers a rule's events only to targets in its own region (EventBridge User
    Guide, "Sending and receiving events between AWS accounts and Regions": a cross-region
    target must be another event bus), so there is one queue per region."""

    def __init__(self, client: Callable[[str], Any], queues: dict[str, str]) -> None:
        self._client = client
        self._queues = dict(queues)
        self._seen: dict[str, datetime] = {}
        self._early: dict[str, datetime] = {}  # rebalance recommendations
        self._lock = threading.Lock()

    @property
    def queues(self) -> dict[str, str]:
        return dict(self._queues)

    def poll(self, now: datetime) -> tuple[dict[str, datetime], list[tuple[str, Exception]]]:
        """Read what is waiting in every queue (no long poll), delete it, and return every
        known warning, with the (region, error) of each queue that could not be read: one
        queue failing never hides another's warnings."""
        errors: list[tuple[str, Exception]] = []
        with self._lock:
            for region, url in sorted(self._queues.items()):
                try:
                    self._drain(self._client(region), url)
                except Exception as exc:  # botocore's; the caller decides how loud
                    errors.append((region, exc))
            for seen in (self._seen, self._early):
                for iid, at in list(seen.items()):
                    if now - at > NOTICE_KEEP:
                        del seen[iid]
            return dict(self._seen), errors

    def early(self) -> dict[str, datetime]:
        """instance id -> when its rebalance recommendation came (as of the last poll)."""
        with self._lock:
            return dict(self._early)

    def _drain(self, sqs: Any, url: str) -> None:
        for _ in range(_MAX_BATCHES):
            resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            messages = resp.get("Messages", [])
            if not messages:
                break
            for m in messages:
                got = parse_event(m.get("Body", ""))
                if got:
                    kind, iid, at = got
                    (self._seen if kind == WARNING else self._early).setdefault(iid, at)
            sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                    for i, m in enumerate(messages)
                ],
            )
