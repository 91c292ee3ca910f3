"""Interruption notices: cloud metadata watchers, the local market's notice file, and SIGTERM.

Watchers run on a daemon thread and only set an Event; the SIGTERM handler only sets a flag.
The training loop looks at both at each step boundary and all ranks agree through the step's
all-reduce, so no I/O and no collective ever runs inside a signal handler.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from types import FrameType

from trainer.config import PreemptionConfig, env_or

log = logging.getLogger("trainer.preemption")

AWS_DEFAULT = "http://169.254.169.254"
GCP_DEFAULT = "http://metadata.google.internal"
AZURE_DEFAULT = "http://169.254.169.254"
AZURE_API = "2020-07-01"
HTTP_TIMEOUT = 2.0
DEFAULT_NOTICE_SECONDS = 30.0
"""GCP and Azure give about 30 s; used when a notice names no time of its own."""
AZURE_FIRST_CALL_TIMEOUT = 120.0
"""Azure: "the first call to Scheduled Events can take up to two minutes" while the service
is enabled for the VM (Azure docs, "Scheduled Events for Linux VMs", Enabling and disabling)."""


def notice_seconds(default: float = DEFAULT_NOTICE_SECONDS) -> float:
    """The notice window the launch asked for ($SPOTWISE_NOTICE_SECONDS: GCP's
    preemptionNoticeDuration plus the shutdown window), else `default`."""
    try:
        value = float(env_or("", "SPOTWISE_NOTICE_SECONDS", ""))
    except ValueError:
        return default
    return value if value > 0 else default


def parse_time(text: object) -> float | None:
    """An ISO-8601 (AWS, local market) or RFC 1123 (Azure) time as epoch seconds."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        pass
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return None


def ignore_stop_signals(worker_id: int = 0) -> None:
    """A DataLoader ``worker_init_fn``: the worker outlives SIGTERM/SIGINT sent to the group.

    A preemption (the cloud's shutdown, systemd stopping the unit, the local market's
    supervisor) signals every process of the job, workers included. A worker that dies of it
    makes the training process raise "DataLoader worker ... killed by signal" before its own
    SIGTERM handler can checkpoint. The training process decides when to stop; its workers
    exit with it (their watchdog sees the parent go).
    """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass
class Notice:
    source: str
    detail: str = ""
    deadline: float | None = None
    """Epoch seconds when the instance goes away (None: unknown, e.g. a bare SIGTERM)."""
    seen_at: float = field(default_factory=time.time)

    @classmethod
    def at(
        cls, source: str, detail: str, when: object = None, window: float = DEFAULT_NOTICE_SECONDS
    ) -> Notice:
        """A notice whose deadline is ``when`` (a time string), else now + `window` s."""
        now = time.time()
        return cls(source, detail, parse_time(when) or now + window, now)

    def record(self) -> dict[str, object]:
        """What progress.json says of it, so the daemon learns the notice from the store."""
        return {
            "source": self.source,
            "seen_at": round(self.seen_at, 3),
            "deadline": None if self.deadline is None else round(self.deadline, 3),
        }

    def seconds_left(self, now: float | None = None) -> float | None:
        if self.deadline is None:
            return None
        return self.deadline - (time.time() if now is None else now)


class Watcher:
    """Polls one notice source on a daemon thread; ``notice`` is set once seen."""

    name = "none"

    def __init__(self, poll_interval: float) -> None:
        self.poll_interval = poll_interval
        self.notice: Notice | None = None
        # An early signal (AWS rebalance recommendation): the instance is at higher risk but
        # not yet reclaimed; the loop takes one extra checkpoint and trains on.
        self.early: Notice | None = None
        self._seen = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> Notice | None:
        """One poll; return a Notice if the instance is being reclaimed. Override."""
        return None

    def acknowledge(self) -> None:
        """Tell the cloud we are done (Azure: StartRequests). Called after the final save."""

    @property
    def seen(self) -> bool:
        return self._seen.is_set()

    def start(self) -> None:
        if type(self) is Watcher:  # no notice source: SIGTERM only, nothing to poll
            return
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                notice = self.check()
            except (OSError, ValueError) as e:  # metadata hiccups must not kill training
                log.debug("%s watcher: %s", self.name, e)
                notice = None
            if notice is not None:
                self.notice = notice
                self._seen.set()
                log.warning("interruption notice from %s: %s", notice.source, notice.detail)
                return
            self._stop.wait(self.poll_interval)


def _request(
    url: str,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = HTTP_TIMEOUT,
) -> tuple[int, bytes, dict[str, str]]:
    """HTTP without proxies (metadata servers are link-local); returns status, body, headers."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as resp:
            return resp.status, resp.read(), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers or {})


class AwsWatcher(Watcher):
    """IMDSv2: PUT a session token, then GET spot/instance-action (404 = no notice)."""

    name = "aws"

    def __init__(self, endpoint: str, poll_interval: float) -> None:
        super().__init__(poll_interval)
        self.endpoint = endpoint.rstrip("/")
        self._token: str | None = None

    def _get_token(self) -> str:
        status, body, _ = _request(
            f"{self.endpoint}/latest/api/token",
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"},
        )
        if status != 200:
            raise ValueError(f"IMDSv2 token request failed: HTTP {status}")
        return body.decode()

    def check(self) -> Notice | None:
        if self._token is None:
            self._token = self._get_token()
        status, body, _ = _request(
            f"{self.endpoint}/latest/meta-data/spot/instance-action",
            headers={"X-aws-ec2-metadata-token": self._token},
        )
        if status == 401:  # token expired: fetch a new one next poll
            self._token = None
            return None
        if self.early is None and status != 200:
            self._check_rebalance()
        if status == 200:
            doc = json.loads(body)
            if doc.get("action") in ("terminate", "stop", "hibernate"):
                detail = f"{doc.get('action')} at {doc.get('time')}"
                return Notice.at("aws", detail, doc.get("time"))
        return None

    def _check_rebalance(self) -> None:
        """IMDS ``events/recommendations/rebalance``: ``{"noticeTime": ...}`` once EC2 sees
        the instance at elevated risk, 404 before (EC2 User Guide, "EC2 instance rebalance
        recommendations")."""
        status, body, _ = _request(
            f"{self.endpoint}/latest/meta-data/events/recommendations/rebalance",
            headers={"X-aws-ec2-metadata-token": self._token or ""},
        )
        if status == 200:
            when = json.loads(body).get("noticeTime")
            self.early = Notice("aws-rebalance", f"rebalance recommended at {when}", None)
            log.warning("rebalance recommendation: an early checkpoint")


class GcpWatcher(Watcher):
    """GCP metadata ``instance/preempted``: a hanging GET that returns when the value changes."""

    name = "gcp"

    def __init__(
        self,
        endpoint: str,
        poll_interval: float,
        wait_seconds: int = 30,
        window: float = DEFAULT_NOTICE_SECONDS,
    ) -> None:
        super().__init__(poll_interval)
        self.endpoint = endpoint.rstrip("/")
        self.wait_seconds = wait_seconds
        self.window = window  # preemptionNoticeDuration + the shutdown window
        self._etag: str | None = None

    def check(self) -> Notice | None:
        url = f"{self.endpoint}/computeMetadata/v1/instance/preempted"
        timeout = HTTP_TIMEOUT
        if self._etag is not None:
            url += f"?wait_for_change=true&last_etag={self._etag}&timeout_sec={self.wait_seconds}"
            timeout = self.wait_seconds + HTTP_TIMEOUT
        status, body, headers = _request(
            url, headers={"Metadata-Flavor": "Google"}, timeout=timeout
        )
        if status != 200:
            self._etag = None
            raise ValueError(f"GCP metadata: HTTP {status}")
        self._etag = {k.lower(): v for k, v in headers.items()}.get("etag")
        if body.decode().strip().upper() == "TRUE":
            return Notice.at("gcp", "instance/preempted = TRUE", window=self.window)
        return None

    def _run(self) -> None:
        # The hanging GET is its own pacing; only sleep between polls after an error.
        while not self._stop.is_set():
            try:
                notice = self.check()
            except (OSError, ValueError) as e:
                log.debug("gcp watcher: %s", e)
                self._stop.wait(self.poll_interval)
                continue
            if notice is not None:
                self.notice = notice
                self._seen.set()
                log.warning("interruption notice from gcp: %s", notice.detail)
                return
            if self._etag is None:
                self._stop.wait(self.poll_interval)


class AzureWatcher(Watcher):
    """Azure Scheduled Events: a ``Preempt`` event; acknowledged via POST StartRequests."""

    name = "azure"

    def __init__(self, endpoint: str, poll_interval: float) -> None:
        super().__init__(poll_interval)
        self.url = f"{endpoint.rstrip('/')}/metadata/scheduledevents?api-version={AZURE_API}"
        self._event_id: str | None = None
        self.first_timeout = AZURE_FIRST_CALL_TIMEOUT
        self._enabled = False

    def check(self) -> Notice | None:
        # The first call enables the service and may take minutes; later ones answer at once.
        timeout = HTTP_TIMEOUT if self._enabled else self.first_timeout
        status, body, _ = _request(self.url, headers={"Metadata": "true"}, timeout=timeout)
        self._enabled = status == 200
        if status != 200:
            raise ValueError(f"Azure scheduled events: HTTP {status}")
        for event in json.loads(body).get("Events", []):
            if event.get("EventType") == "Preempt":
                self._event_id = event.get("EventId")
                detail = f"Preempt {self._event_id} not before {event.get('NotBefore')}"
                return Notice.at("azure", detail, event.get("NotBefore"))
        return None

    def acknowledge(self) -> None:
        if self._event_id is None:
            return
        body = json.dumps({"StartRequests": [{"EventId": self._event_id}]}).encode()
        try:
            _request(
                self.url,
                method="POST",
                headers={"Metadata": "true", "Content-Type": "application/json"},
                body=body,
            )
        except OSError as e:
            log.warning("could not acknowledge Azure event %s: %s", self._event_id, e)


class FileWatcher(Watcher):
    """The local market writes ``{"action": "terminate", "time": ...}`` to a notice file."""

    name = "local"

    def __init__(self, path: Path, poll_interval: float) -> None:
        super().__init__(poll_interval)
        self.path = path

    def check(self) -> Notice | None:
        if self.path.exists():
            try:
                detail = self.path.read_text()
            except OSError:
                detail = ""
            try:
                when = json.loads(detail).get("time")
            except (ValueError, AttributeError):
                when = None
            return Notice.at("local", detail.strip(), when)
        return None


def make_watcher(cfg: PreemptionConfig) -> Watcher:
    """The watcher for preemption.cloud (else $SPOTWISE_CLOUD); ``Watcher`` when none applies."""
    cloud = env_or(cfg.cloud, "SPOTWISE_CLOUD", "none").lower()
    interval = cfg.poll_interval_seconds
    if cloud == "aws":
        return AwsWatcher(
            env_or(cfg.aws_endpoint, "SPOTWISE_AWS_IMDS_ENDPOINT", AWS_DEFAULT), interval
        )
    if cloud == "gcp":
        endpoint = env_or(cfg.gcp_endpoint, "SPOTWISE_GCP_METADATA_ENDPOINT", GCP_DEFAULT)
        return GcpWatcher(endpoint, interval, window=notice_seconds())
    if cloud == "azure":
        endpoint = env_or(cfg.azure_endpoint, "SPOTWISE_AZURE_METADATA_ENDPOINT", AZURE_DEFAULT)
        return AzureWatcher(endpoint, interval)
    if cloud == "local":
        path = env_or(cfg.notice_file, "SPOTWISE_NOTICE_FILE", "")
        if not path:
            log.warning("SPOTWISE_CLOUD=local without SPOTWISE_NOTICE_FILE: SIGTERM only")
            return Watcher(interval)
        return FileWatcher(Path(path), interval)
    if cloud not in ("none", ""):
        raise ValueError(f"unknown cloud {cloud!r} (SPOTWISE_CLOUD must be aws|gcp|azure|local)")
    return Watcher(interval)


class SigtermFlag:
    """SIGTERM handler that only records the signal (no I/O, no collectives)."""

    def __init__(self) -> None:
        self.received = False
        self._previous: object = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = True

    def install(self) -> None:
        """Idempotent; only the main thread may install signal handlers."""
        if self._previous is None and threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)  # type: ignore[arg-type]
            self._previous = None


SIGTERM = SigtermFlag()
"""The process-wide flag: installed by ``__main__`` before torch is imported, so a SIGTERM
that arrives during start-up still means "checkpoint and exit 75", not an abrupt death."""
