"""Loopback fakes of the three clouds' metadata servers (stdlib ThreadingHTTPServer, port 0).

Each fake starts with no notice; ``preempt()`` flips it. They check the headers the real
services require, so a watcher that forgets one never sees a notice.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


class _Fake:
    """Common server plumbing; subclasses implement ``handle(handler, method)``."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.preempted = False
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        """(method, path, headers with lower-case names)"""
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._dispatch(self, "GET")

            def do_PUT(self) -> None:
                fake._dispatch(self, "PUT")

            def do_POST(self) -> None:
                fake._dispatch(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> _Fake:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.lock.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def preempt(self) -> None:
        with self.lock:
            self.preempted = True
            self.lock.notify_all()

    def _dispatch(self, h: BaseHTTPRequestHandler, method: str) -> None:
        with self.lock:
            self.requests.append((method, h.path, {k.lower(): v for k, v in h.headers.items()}))
        self.handle(h, method)

    def handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        raise NotImplementedError

    @staticmethod
    def reply(
        h: BaseHTTPRequestHandler, status: int, body: bytes = b"", headers: dict | None = None
    ) -> None:
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)


class FakeImds(_Fake):
    """AWS IMDSv2: PUT /latest/api/token, then GET spot/instance-action with the token."""

    def __init__(self) -> None:
        super().__init__()
        self.token = uuid.uuid4().hex
        self.rebalance = False

    def recommend_rebalance(self) -> None:
        with self.lock:
            self.rebalance = True

    def handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        path = urlparse(h.path).path
        if method == "PUT" and path == "/latest/api/token":
            if not h.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return self.reply(h, 400)
            return self.reply(h, 200, self.token.encode())
        if method == "GET" and path == "/latest/meta-data/spot/instance-action":
            if h.headers.get("X-aws-ec2-metadata-token") != self.token:
                return self.reply(h, 401)
            if not self.preempted:
                return self.reply(h, 404, b"Not Found")
            doc = {"action": "terminate", "time": "2026-11-29T15:00:00Z"}
            return self.reply(h, 200, json.dumps(doc).encode(), {"Content-Type": "text/plain"})
        if method == "GET" and path == "/latest/meta-data/events/recommendations/rebalance":
            # EC2 User Guide, "Rebalance recommendation signal": 404 until the signal, then
            # {"noticeTime": "2020-10-27T08:22:00Z"}.
            if h.headers.get("X-aws-ec2-metadata-token") != self.token:
                return self.reply(h, 401)
            if not self.rebalance:
                return self.reply(h, 404, b"Not Found")
            doc = {"noticeTime": "2026-11-29T14:50:00Z"}
            return self.reply(h, 200, json.dumps(doc).encode(), {"Content-Type": "text/plain"})
        return self.reply(h, 404)


class FakeGcpMetadata(_Fake):
    """GCP: instance/preempted with Metadata-Flavor: Google; wait_for_change hangs."""

    def __init__(self) -> None:
        super().__init__()
        self.hanging_gets = 0

    def _etag(self) -> str:
        return "etag-true" if self.preempted else "etag-false"

    def handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urlparse(h.path)
        if url.path != "/computeMetadata/v1/instance/preempted" or method != "GET":
            return self.reply(h, 404)
        if h.headers.get("Metadata-Flavor") != "Google":
            return self.reply(h, 403)
        query = parse_qs(url.query)
        with self.lock:
            if query.get("wait_for_change") == ["true"]:
                self.hanging_gets += 1
                last = query.get("last_etag", [""])[0]
                timeout = float(query.get("timeout_sec", ["30"])[0])
                self.lock.wait_for(lambda: self._etag() != last, timeout=timeout)
            value, etag = ("TRUE" if self.preempted else "FALSE"), self._etag()
        self.reply(h, 200, value.encode(), {"ETag": etag, "Metadata-Flavor": "Google"})


class FakeAzureEvents(_Fake):
    """Azure Scheduled Events with Metadata: true; records StartRequests acknowledgements."""

    def __init__(self) -> None:
        super().__init__()
        self.event_id = str(uuid.uuid4()).upper()
        self.acknowledged: list[str] = []
        # Seconds the first GET takes: the service being enabled for the VM (Azure: "up to
        # two minutes").
        self.first_delay = 0.0
        self._gets = 0

    def handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        url = urlparse(h.path)
        if url.path != "/metadata/scheduledevents":
            return self.reply(h, 404)
        if h.headers.get("Metadata") != "true":
            return self.reply(h, 400)
        if method == "POST":
            body = json.loads(h.rfile.read(int(h.headers.get("Content-Length", "0"))))
            with self.lock:
                self.acknowledged += [r["EventId"] for r in body.get("StartRequests", [])]
            return self.reply(h, 200)
        with self.lock:
            self._gets += 1
            first = self._gets == 1
        if first and self.first_delay:
            time.sleep(self.first_delay)
        events = []
        if self.preempted:
            events.append(
                {
                    "EventId": self.event_id,
                    "EventType": "Preempt",
                    "ResourceType": "VirtualMachine",
                    "Resources": ["vm-1"],
                    "EventStatus": "Scheduled",
                    "NotBefore": "Sun, 29 Nov 2026 15:00:30 GMT",
                    "Description": "",
                    "EventSource": "Platform",
                    "DurationInSeconds": -1,
                }
            )
        doc = {"DocumentIncarnation": 2 if self.preempted else 1, "Events": events}
        self.reply(h, 200, json.dumps(doc).encode(), {"Content-Type": "application/json"})
