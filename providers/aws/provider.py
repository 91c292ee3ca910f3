"""AwsProvider: the Provider protocol over EC2, the Pricing API and (optionally) SQS.

It makes no decisions: it lists GPU offerings with current prices, launches exactly what it is
told (idempotently, via ClientToken plus a token tag), reports what EC2 says, and terminates.
Instance ids carry no region, so the regions of ids it has seen are remembered; unknown ids
are looked up in every configured region.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from providers.aws.catalog import GpuType, chunks, fetch_gpu_types, fetch_spot_prices, fetch_zones
from providers.aws.errors import CAPACITY_CODES, QUOTA_CODES, error_code, scrub, translate
from providers.aws.instances import CLOUD, to_instance
from providers.aws.notices import InterruptionNotices, queue_region
from providers.aws.pricing import OnDemandPrices
from providers.aws.settings import AwsSettings
from providers.aws.userdata import build_user_data
from providers.base import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_OWNER,
    EndReason,
    FatalError,
    Instance,
    InstanceState,
    LaunchRequest,
    Market,
    Offering,
    ProviderError,
)

log = logging.getLogger("spotwise.providers.aws")

TAG_TOKEN = "spotwise-token"  # the ClientToken, so adoption works where that filter does not
LIVE_STATES = ("pending", "running", "stopping", "stopped")
# describe_instances is eventually consistent: a just-launched id can be missing for a while.
LAUNCH_VISIBILITY_GRACE = timedelta(minutes=5)
_CLIENT_TOKEN = re.compile(r"^[\x21-\x7e]{1,64}$")
_MAX_KNOWN = 20_000


def client_token(token: str) -> str:
    """EC2 ClientTokens are at most 64 printable ASCII characters; longer ones are hashed."""
    if _CLIENT_TOKEN.match(token):
        return token
    return "sw-" + hashlib.sha256(token.encode()).hexdigest()[:61]


class _Clock(Protocol):
    """Anything with now() (scheduler.clock.Clock fits); providers do not import scheduler."""

    def now(self) -> datetime: ...


@dataclass(slots=True)
class _Stamped:
    at: datetime
    value: Any


@dataclass(slots=True)
class _Network:
    zones: dict[str, str] | None  # zone -> subnet; None = default VPC, every zone
    security_groups: list[str] = field(default_factory=list)


class AwsProvider:
    """One AWS account across the configured regions."""

    name = "aws"

    def __init__(
        self,
        settings: AwsSettings,
        *,
        owner: str = "spotwise",
        session: boto3.Session | None = None,
        clock: _Clock | None = None,
    ) -> None:
        self.settings = settings
        self.owner = owner
        self._clock = clock
        try:
            self._session = session or boto3.Session(profile_name=settings.profile)
        except (BotoCoreError, ClientError) as exc:
            raise translate(exc, what="session") from None
        self._config = Config(
            retries={"mode": settings.retry_mode, "total_max_attempts": settings.max_attempts},
            connect_timeout=settings.connect_timeout.total_seconds(),
            read_timeout=settings.read_timeout.total_seconds(),
            user_agent_extra="spotwise",
        )
        self._lock = threading.RLock()
        self._clients: dict[tuple[str, str], Any] = {}
        self._events: deque[str] = deque(maxlen=1000)
        self._types: dict[str, _Stamped] = {}  # region -> (types, zones by type)
        self._offers: dict[str, _Stamped] = {}  # region -> list[Offering]
        self._networks: dict[str, _Stamped] = {}
        self._known: dict[str, Instance] = {}  # id -> last view (region memory, launch grace)
        self._launched: dict[str, datetime] = {}  # id -> when we launched it (our clock)
        self._ondemand = OnDemandPrices(
            self._pricing_client,
            ttl=settings.catalog_refresh,
            retry_after=settings.price_refresh,
            emit=self._emit,
            secrets=self._secrets,
        )
        self._notices = (
            InterruptionNotices(self._sqs_client, settings.sqs_queue_url)
            if settings.sqs_queue_url
            else None
        )

    # ----------------------------------------------------------------- plumbing

    def _now(self) -> datetime:
        return self._clock.now() if self._clock is not None else datetime.now(UTC)

    def drain_events(self) -> list[str]:
        """Warnings the daemon should record (price fallbacks, skipped regions); cleared."""
        with self._lock:
            out = list(self._events)
            self._events.clear()
            return out

    def _emit(self, message: str) -> None:
        message = scrub(message, self._secrets())
        log.warning("%s", message)
        with self._lock:
            self._events.append(message)

    def _secrets(self) -> list[str]:
        try:
            creds = self._session.get_credentials()
            if creds is None:
                return []
            frozen = creds.get_frozen_credentials()
            return [s for s in (frozen.access_key, frozen.secret_key, frozen.token) if s]
        except Exception:
            return []

    def _client(self, service: str, region: str, endpoint_url: str | None) -> Any:
        with self._lock:  # boto3 sessions are not thread-safe; the clients they make are
            key = (service, region)
            if key not in self._clients:
                try:
                    self._clients[key] = self._session.client(
                        service, region_name=region, endpoint_url=endpoint_url, config=self._config
                    )
                except (BotoCoreError, ClientError) as exc:
                    raise translate(exc, what=f"{service} client", secrets=self._secrets) from None
            return self._clients[key]

    def _ec2(self, region: str) -> Any:
        with self._lock:
            fresh = ("ec2", region) not in self._clients
            client = self._client("ec2", region, self.settings.endpoint_url)
            if fresh:
                client.meta.events.register_first(
                    "needs-retry.ec2.RunInstances", _capacity_is_an_answer
                )
            return client

    def _pricing_client(self) -> Any:
        s = self.settings
        return self._client("pricing", s.pricing_region, s.pricing_endpoint_url)

    def _sqs_client(self) -> Any:
        s = self.settings
        region = s.sqs_region or queue_region(s.sqs_queue_url or "") or s.regions[0]
        return self._client("sqs", region, s.sqs_endpoint_url)

    def _call(self, what: str, fn: Callable[[], Any], pool: str | None = None) -> Any:
        try:
            return fn()
        except ProviderError:
            raise
        except (BotoCoreError, ClientError) as exc:
            raise translate(exc, what=what, pool=pool, secrets=self._secrets) from None

    # ----------------------------------------------------------------- offerings

    def offerings(self) -> list[Offering]:
        if not self.settings.enabled:
            return []
        out: list[Offering] = []
        failures: list[ProviderError] = []
        for region in self.settings.regions:
            try:
                out.extend(self._region_offerings(region))
            except ProviderError as exc:
                stale = self._offers.get(region)
                if stale is not None:
                    self._emit(
                        f"aws: price refresh failed in {region} ({exc}); keeping the offerings "
                        f"seen at {stale.at.isoformat()}"
                    )
                    out.extend(stale.value)
                else:
                    self._emit(f"aws: no offerings from {region}: {exc}")
                    failures.append(exc)
        if failures and not out:
            raise failures[0]
        return out

    def _region_offerings(self, region: str) -> list[Offering]:
        now = self._now()
        cached = self._offers.get(region)
        if cached is not None and now - cached.at < self.settings.price_refresh:
            return cached.value
        types, zones_by_type = self._gpu_types(region, now)
        net = self._network(region, now)
        ec2 = self._ec2(region)
        spot_types = [t for t, g in types.items() if g.spot and zones_by_type.get(t)]
        spot = self._call(
            f"describe_spot_price_history in {region}",
            lambda: fetch_spot_prices(ec2, spot_types, now),
        )
        od_types = [t for t, g in types.items() if g.on_demand and zones_by_type.get(t)]
        on_demand = self._ondemand.prices(region, od_types, now)

        def usable(zone: str) -> bool:
            return net.zones is None or zone in net.zones

        offers: list[Offering] = []
        for name, gpu in sorted(types.items()):
            offered = [z for z in zones_by_type.get(name, []) if usable(z)]
            for zone in offered:
                price = spot.get((zone, name))
                if gpu.spot and price is not None:
                    offers.append(_offering(region, zone, gpu, Market.SPOT, price, now))
                if gpu.on_demand and name in on_demand:
                    offers.append(
                        _offering(region, zone, gpu, Market.ON_DEMAND, on_demand[name], now)
                    )
        with self._lock:
            self._offers[region] = _Stamped(now, offers)
        return offers

    def _gpu_types(
        self, region: str, now: datetime
    ) -> tuple[dict[str, GpuType], dict[str, list[str]]]:
        cached = self._types.get(region)
        if cached is not None and now - cached.at < self.settings.catalog_refresh:
            return cached.value
        ec2 = self._ec2(region)
        s = self.settings
        types = self._call(
            f"describe_instance_types in {region}",
            lambda: fetch_gpu_types(ec2, s.instance_types, s.architectures),
        )
        zones = self._call(
            f"describe_instance_type_offerings in {region}",
            lambda: fetch_zones(ec2, list(types)),
        )
        with self._lock:
            self._types[region] = _Stamped(now, (types, zones))
        return types, zones

    def _network(self, region: str, now: datetime) -> _Network:
        cached = self._networks.get(region)
        if cached is not None and now - cached.at < self.settings.catalog_refresh:
            return cached.value
        s = self.settings
        ec2 = self._ec2(region)
        zones: dict[str, str] | None = None
        if s.subnet_ids:
            subnets = self._call(
                f"describe_subnets in {region}",
                lambda: _paged(
                    ec2,
                    "describe_subnets",
                    "Subnets",
                    Filters=[{"Name": "subnet-id", "Values": s.subnet_ids}],
                ),
            )
            zones = {}
            for sn in sorted(subnets, key=lambda x: x["SubnetId"]):
                zones.setdefault(sn["AvailabilityZone"], sn["SubnetId"])
            if not zones:
                self._emit(f"aws: none of the configured subnets is in {region}; nothing offered")
        groups: list[str] = []
        if s.security_group_ids:
            found = self._call(
                f"describe_security_groups in {region}",
                lambda: _paged(
                    ec2,
                    "describe_security_groups",
                    "SecurityGroups",
                    Filters=[{"Name": "group-id", "Values": s.security_group_ids}],
                ),
            )
            groups = sorted(g["GroupId"] for g in found)
        net = _Network(zones, groups)
        with self._lock:
            self._networks[region] = _Stamped(now, net)
        return net

    # ----------------------------------------------------------------- launch

    def launch(self, request: LaunchRequest) -> Instance:
        o = request.offering
        if o.cloud != CLOUD:
            raise FatalError(f"aws launch: offering belongs to cloud {o.cloud!r}")
        if o.region not in self.settings.regions:
            raise FatalError(f"aws launch: region {o.region} is not configured")
        token = client_token(request.token)
        existing = self._find_token_in(o.region, token)
        if existing is not None:  # a retry after a lost reply: adopt, never launch twice
            return existing
        now = self._now()
        params = self._run_params(request, token, now)
        ec2 = self._ec2(o.region)
        resp = self._call(
            f"run_instances {o.instance_type} ({o.market.value}) in {o.zone}",
            lambda: ec2.run_instances(**params),
            pool=o.pool,
        )
        inst = to_instance(resp["Instances"][0], now)
        inst.region = o.region
        # EC2 echoes the request; the market is ours even where the echo lacks it.
        inst.market = o.market
        with self._lock:
            self._launched[inst.id] = now
        self._remember([inst], now)
        return inst

    def _run_params(self, request: LaunchRequest, token: str, now: datetime) -> dict[str, Any]:
        s = self.settings
        o = request.offering
        net = self._network(o.region, now)
        tags = {str(k): str(v) for k, v in request.tags.items()}
        tags.setdefault(TAG_OWNER, self.owner)
        tags[TAG_TOKEN] = token
        tags.setdefault(
            "Name", f"spotwise-{tags.get(TAG_JOB, 'job')}-{tags.get(TAG_ATTEMPT, token)}"[:255]
        )
        env = {str(k): str(v) for k, v in request.env.items()}
        env["SPOTWISE_CLOUD"] = CLOUD
        tag_list = [{"Key": k[:128], "Value": v[:256]} for k, v in tags.items()]
        params: dict[str, Any] = {
            "ImageId": s.ami_for(o.region),
            "InstanceType": o.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": token,
            "UserData": build_user_data(request.command, env),
            "InstanceInitiatedShutdownBehavior": "terminate",
            "Placement": {"AvailabilityZone": o.zone},
            # IMDSv2 only; hop limit 2 so a job in a container can read the interruption notice.
            "MetadataOptions": {
                "HttpTokens": "required",
                "HttpEndpoint": "enabled",
                "HttpPutResponseHopLimit": 2,
            },
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
        }
        if o.market is Market.SPOT:
            params["InstanceMarketOptions"] = {
                "MarketType": "spot",
                # No MaxPrice: capped at the on-demand price, which AWS recommends.
                "SpotOptions": {
                    "SpotInstanceType": "one-time",
                    "InstanceInterruptionBehavior": "terminate",
                },
            }
        if net.zones is not None:
            subnet = net.zones.get(o.zone)
            if subnet is None:
                raise FatalError(f"aws launch: no configured subnet in zone {o.zone}")
            params["SubnetId"] = subnet
        if net.security_groups:
            params["SecurityGroupIds"] = net.security_groups
        if s.instance_profile:
            key = "Arn" if s.instance_profile.startswith("arn:") else "Name"
            params["IamInstanceProfile"] = {key: s.instance_profile}
        if s.key_name:
            params["KeyName"] = s.key_name
        return params

    # ----------------------------------------------------------------- observe

    def describe(self, instance_ids: Sequence[str]) -> list[Instance]:
        ids = list(dict.fromkeys(instance_ids))
        if not ids:
            return []
        now = self._now()
        found = self._locate(ids)
        out: list[Instance] = []
        for iid in ids:
            inst = found.get(iid)
            if inst is None:
                inst = self._missing(iid, now)
            out.append(inst)
        self._apply_notices(out, now)
        self._remember(out, now)
        return out

    def _missing(self, iid: str, now: datetime) -> Instance:
        """An id EC2 does not show: just launched (not visible yet) or gone for good."""
        known = self._known.get(iid)
        launched = self._launched.get(iid)
        if (
            known is not None
            and known.state is not InstanceState.ENDED
            and launched is not None
            and now - launched < LAUNCH_VISIBILITY_GRACE
        ):
            return replace(known, tags=dict(known.tags))
        if known is not None:
            ended = replace(known, tags=dict(known.tags), state=InstanceState.ENDED)
            ended.end_reason = known.end_reason or EndReason.UNKNOWN
            ended.ended_at = known.ended_at or now
            return ended
        return Instance(
            id=iid,
            cloud=CLOUD,
            region="",
            zone="",
            instance_type="",
            market=Market.ON_DEMAND,
            state=InstanceState.ENDED,
            ended_at=now,
            end_reason=EndReason.UNKNOWN,
        )

    def _locate(self, ids: Sequence[str]) -> dict[str, Instance]:
        """Describe ids in the regions they are known to be in, the rest everywhere."""
        now = self._now()
        by_region: dict[str, list[str]] = {}
        unknown: list[str] = []
        for iid in ids:
            known = self._known.get(iid)
            if known is not None and known.region in self.settings.regions:
                by_region.setdefault(known.region, []).append(iid)
            else:
                unknown.append(iid)
        found: dict[str, Instance] = {}
        for region in self.settings.regions:
            wanted = by_region.get(region, []) + unknown
            if not wanted:
                continue
            for inst in self._describe_filtered(
                region, [{"Name": "instance-id", "Values": c} for c in chunks(wanted)], now
            ):
                found[inst.id] = inst
        return found

    def _describe_filtered(
        self,
        region: str,
        filter_sets: Iterable[dict[str, Any]],
        now: datetime,
        extra: Sequence[dict[str, Any]] = (),
    ) -> list[Instance]:
        """describe_instances with filters (never InstanceIds: one unknown id fails them all)."""
        ec2 = self._ec2(region)
        out: list[Instance] = []
        for f in filter_sets:
            filters = [f, *extra]
            raws = self._call(
                f"describe_instances in {region}",
                lambda filters=filters: [
                    i
                    for r in _paged(ec2, "describe_instances", "Reservations", Filters=filters)
                    for i in r.get("Instances", [])
                ],
            )
            for raw in raws:
                inst = to_instance(raw, now)
                inst.region = inst.region or region
                out.append(inst)
        return out

    def list_tagged(self, owner: str) -> list[Instance]:
        now = self._now()
        out: list[Instance] = []
        for region in self.settings.regions:
            out.extend(
                self._describe_filtered(
                    region,
                    [{"Name": f"tag:{TAG_OWNER}", "Values": [owner]}],
                    now,
                    extra=[{"Name": "instance-state-name", "Values": list(LIVE_STATES)}],
                )
            )
        self._apply_notices(out, now)
        self._remember(out, now)
        return out

    def find_by_token(self, token: str) -> Instance | None:
        ct = client_token(token)
        for region in self.settings.regions:
            inst = self._find_token_in(region, ct)
            if inst is not None:
                return inst
        return None

    def _find_token_in(self, region: str, ct: str) -> Instance | None:
        # By tag rather than the `client-token` filter: the tag is written atomically with the
        # instance (TagSpecifications), and the filter is missing from moto.
        now = self._now()
        found = self._describe_filtered(region, [{"Name": f"tag:{TAG_TOKEN}", "Values": [ct]}], now)
        if not found:
            return None
        live = [i for i in found if i.state is not InstanceState.ENDED]
        pick = max(live or found, key=lambda i: i.launched_at or now)
        self._apply_notices([pick], now)
        self._remember([pick], now)
        return pick

    def _apply_notices(self, instances: Sequence[Instance], now: datetime) -> None:
        if self._notices is None or not instances:
            return
        try:
            warned = self._notices.poll(now)
        except (BotoCoreError, ClientError) as exc:
            self._emit(
                f"aws: cannot read the interruption queue: {error_code(exc)}: "
                f"{scrub(str(exc), self._secrets())}"
            )
            return
        for inst in instances:
            at = warned.get(inst.id)
            if at is not None and inst.state is not InstanceState.ENDED:
                inst.notice_at = at

    def _remember(self, instances: Iterable[Instance], now: datetime) -> None:
        with self._lock:
            for inst in instances:
                if not inst.region:
                    continue
                prev = self._known.get(inst.id)
                if prev is not None and inst.launched_at is None:
                    inst.launched_at = prev.launched_at
                self._known[inst.id] = replace(inst, tags=dict(inst.tags))
            if len(self._known) > _MAX_KNOWN:
                for iid in [k for k, v in self._known.items() if v.state is InstanceState.ENDED]:
                    del self._known[iid]
                    self._launched.pop(iid, None)

    # ----------------------------------------------------------------- terminate

    def terminate(self, instance_ids: Sequence[str]) -> None:
        ids = list(dict.fromkeys(instance_ids))
        if not ids:
            return
        found = self._locate(ids)  # only ids EC2 still knows; terminating those is idempotent
        by_region: dict[str, list[str]] = {}
        for inst in found.values():
            if inst.region:
                by_region.setdefault(inst.region, []).append(inst.id)
        for region, rids in by_region.items():
            ec2 = self._ec2(region)
            for chunk in chunks(rids):
                try:
                    ec2.terminate_instances(InstanceIds=chunk)
                except ClientError as exc:
                    if error_code(exc).startswith("InvalidInstanceID"):
                        continue  # vanished between describe and terminate
                    raise translate(
                        exc, what=f"terminate_instances in {region}", secrets=self._secrets
                    ) from None
                except BotoCoreError as exc:
                    raise translate(
                        exc, what=f"terminate_instances in {region}", secrets=self._secrets
                    ) from None


def _capacity_is_an_answer(response: Any = None, **_: Any) -> None:
    """EC2 sends InsufficientInstanceCapacity as a 500, which botocore would retry with
    backoff; it is an answer about the pool, so the scheduler should move on at once.

    Runs just before botocore's retry handler and lowers the status it judges by.
    """
    if not response:
        return
    http, parsed = response
    code = (parsed or {}).get("Error", {}).get("Code")
    if code in CAPACITY_CODES or code in QUOTA_CODES:
        http.status_code = min(http.status_code, 400)


def _offering(
    region: str, zone: str, gpu: GpuType, market: Market, price: float, now: datetime
) -> Offering:
    return Offering(
        cloud=CLOUD,
        region=region,
        zone=zone,
        instance_type=gpu.instance_type,
        gpu_model=gpu.gpu_model,
        gpu_count=gpu.gpu_count,
        gpu_memory_gb=gpu.gpu_memory_gb,
        vcpus=gpu.vcpus,
        memory_gb=gpu.memory_gb,
        market=market,
        price_per_hour=price,
        seen_at=now,
    )


def _paged(client: Any, operation: str, key: str, **kwargs: Any) -> list[Any]:
    out: list[Any] = []
    for page in client.get_paginator(operation).paginate(**kwargs):
        out.extend(page.get(key, []))
    return out
