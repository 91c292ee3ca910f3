"""Instances (and what they leave): launch, describe, terminate, list by tag, find by token.

Stateless on purpose: every call finds resources from what the caller passes (a ref's
region) or from EC2's tags, so a daemon restart loses nothing. Ids EC2 does not show come
back NOT_FOUND; the scheduler owns the launch-visibility grace (capabilities say how long).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from providers.aws.api import Api, paged
from providers.aws.errors import error_code, translate
from providers.aws.instance_types import chunks
from providers.aws.network import Networks
from providers.aws.notices import InterruptionNotices
from providers.aws.parse import CLOUD, region_of_zone, to_instance, volume_resource
from providers.aws.userdata import build_user_data
from providers.base import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_NODE,
    TAG_OWNER,
    FatalError,
    Instance,
    InstanceState,
    LaunchRejected,
    LaunchRequest,
    Market,
    ResourceKind,
    ResourceRef,
    TaggedResource,
    not_found,
)
from providers.masking import mask_message

TAG_TOKEN = "spotwise-token"  # the ClientToken, so adoption works where that filter does not
# Every state but "terminated": stopped boxes still cost (EBS) and are ours to clean up.
LISTED_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")
# EC2 has no per-call cap on MinCount=MaxCount (the account's instance-type quota is the
# limit, surfacing as QuotaExceeded); this bounds a gang to what one placement group and
# one all-or-nothing request sensibly hold.
MAX_GANG = 64
_CLIENT_TOKEN = re.compile(r"^[\x21-\x7e]{1,64}$")


def client_token(token: str) -> str:
    """EC2 ClientTokens are at most 64 printable ASCII characters; longer ones are hashed."""
    if _CLIENT_TOKEN.match(token):
        return token
    return "sw-" + hashlib.sha256(token.encode()).hexdigest()[:61]


class Instances:
    def __init__(
        self,
        api: Api,
        networks: Networks,
        owner: str,
        notices: InterruptionNotices | None = None,
    ) -> None:
        self._api = api
        self._networks = networks
        self._owner = owner
        self._notices = notices
        self._no_groups: set[str] = set()  # regions whose endpoint lists no placement groups

    @property
    def _regions(self) -> list[str]:
        return list(self._api.settings.regions)

    # ----------------------------------------------------------------- launch

    def launch(self, request: LaunchRequest) -> list[Instance]:
        """One RunInstances with MinCount=MaxCount=count and one ClientToken: the gang
        starts whole or not at all, and a retry (same token) returns the same instances."""
        o = request.offering
        if o.cloud != CLOUD:
            raise FatalError(f"aws launch: offering belongs to cloud {o.cloud!r}")
        if o.region not in self._regions:
            raise FatalError(f"aws launch: region {o.region} is not configured")
        if not 1 <= request.count <= MAX_GANG:
            raise LaunchRejected(f"aws launch: count {request.count} is not in 1..{MAX_GANG}")
        token = client_token(request.token)
        existing = self._by_token(o.region, token)
        if existing:  # a retry after a lost reply or a restart: adopt, never launch twice
            return existing
        now = self._api.now()
        params = self._run_params(request, token)
        ec2 = self._api.ec2(o.region)
        if request.placement_group:
            self._ensure_group(o.region, request)
        resp = self._api.call(
            f"run_instances {request.count} x {o.instance_type} ({o.market.value}) in {o.zone}",
            lambda: ec2.run_instances(**params),
            pool=o.pool,
            request=True,
        )
        out = []
        for raw in resp.get("Instances", []):
            inst = to_instance(raw, now, o.region)
            inst.market = o.market  # ours even where EC2's echo lacks InstanceLifecycle
            out.append(inst)
        out.sort(key=lambda i: i.node)
        if request.count > 1:
            self._tag_nodes(o.region, out)
        return out

    def _ensure_group(self, region: str, request: LaunchRequest) -> None:
        """The gang's cluster placement group (one per attempt, tagged like its instances so
        leak collection deletes it once the attempt is over); an existing one is reused."""
        ec2 = self._api.ec2(region)
        tags = {str(k): str(v) for k, v in request.tags.items()}
        tags.setdefault(TAG_OWNER, self._owner)
        try:
            ec2.create_placement_group(
                GroupName=request.placement_group,
                Strategy="cluster",
                TagSpecifications=[
                    {
                        "ResourceType": "placement-group",
                        "Tags": [{"Key": k[:128], "Value": v[:256]} for k, v in tags.items()],
                    }
                ],
            )
        except ClientError as exc:
            if error_code(exc) != "InvalidPlacementGroup.Duplicate":
                raise translate(
                    exc, what=f"create_placement_group in {region}", secrets=self._api.secrets
                ) from None
        except BotoCoreError as exc:
            raise translate(
                exc, what=f"create_placement_group in {region}", secrets=self._api.secrets
            ) from None

    def _tag_nodes(self, region: str, instances: list[Instance]) -> None:
        """Node tags for a gang (TagSpecifications are one for all). Best effort: the node
        index is also EC2's AmiLaunchIndex, which describe reads when the tag is missing."""
        ec2 = self._api.ec2(region)
        for inst in instances:
            try:
                ec2.create_tags(
                    Resources=[inst.id], Tags=[{"Key": TAG_NODE, "Value": str(inst.node)}]
                )
                inst.tags[TAG_NODE] = str(inst.node)
            except (BotoCoreError, ClientError) as exc:
                self._api.emit(
                    f"aws: could not tag {inst.id} as node {inst.node} "
                    f"({error_code(exc)}); describe falls back to its launch index"
                )

    def _run_params(self, request: LaunchRequest, token: str) -> dict[str, Any]:
        s = self._api.settings
        o = request.offering
        net = self._networks.get(o.region)
        tags = {str(k): str(v) for k, v in request.tags.items()}
        tags.setdefault(TAG_OWNER, self._owner)
        tags[TAG_TOKEN] = token
        if request.count == 1:  # one VM, or one node of a gang replacing a lost one
            tags[TAG_NODE] = str(request.node_of(0))
        tags.setdefault(
            "Name", f"spotwise-{tags.get(TAG_JOB, 'job')}-{tags.get(TAG_ATTEMPT, token)}"[:255]
        )
        env = {str(k): str(v) for k, v in request.env.items()}
        env["SPOTWISE_CLOUD"] = CLOUD
        if request.count > 1:
            # Nodes find node 0 (launch index 0) by this tag to rendezvous with it.
            env["SPOTWISE_GANG_TOKEN"] = token
        elif request.gang_node is not None:
            # A node replacing a lost one keeps its rank (its launch index is 0); as node 0
            # it hosts the rendezvous at its own address, the others read node 0's from
            # the checkpoint store's round.
            env["SPOTWISE_NODE"] = env["SPOTWISE_NODE_RANK"] = str(request.gang_node)
        # EC2 tag limits: keys 128, values 256 characters (Capabilities.label keeps values).
        tag_list = [{"Key": k[:128], "Value": v[:256]} for k, v in tags.items()]
        placement: dict[str, Any] = {"AvailabilityZone": o.zone}
        if request.placement_group:
            placement["GroupName"] = request.placement_group
        params: dict[str, Any] = {
            "ImageId": s.ami_for(o.region),
            "InstanceType": o.instance_type,
            "MinCount": request.count,
            "MaxCount": request.count,
            "ClientToken": token,
            "UserData": build_user_data(
                request.command,
                env,
                gang=request.count > 1 or request.gang_node == 0,
                gpus=o.gpu_count,
            ),
            "InstanceInitiatedShutdownBehavior": "terminate",
            "Placement": placement,
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
            spot: dict[str, Any] = {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            }
            if request.max_price_per_hour is not None:
                # The job's cap. SpotMarketOptions.MaxPrice is a string of dollars per
                # hour (botocore's ec2 service-2.json); without one the cap is the
                # on-demand price, which AWS recommends for jobs that set none.
                spot["MaxPrice"] = max_price_text(request.max_price_per_hour)
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
        subnet = net.subnet_for(o.zone)
        if subnet is not None:
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

    def describe(self, refs: Sequence[ResourceRef]) -> list[Instance]:
        """One Instance per ref, in order; ids EC2 does not show are NOT_FOUND."""
        if not refs:
            return []
        now = self._api.now()
        found: dict[str, Instance] = {}
        for region, ids in self._by_region(refs).items():
            for inst in self._describe(
                region, [{"Name": "instance-id", "Values": c} for c in chunks(ids)], now
            ):
                found.setdefault(inst.id, inst)
        out = [found.get(r.id) or not_found(r, CLOUD) for r in refs]
        self._apply_notices(out, now)
        return out

    def _by_region(self, refs: Iterable[ResourceRef]) -> dict[str, list[str]]:
        """ids per region: the ref's region (or its zone's); a ref without either is looked
        for in every configured region."""
        out: dict[str, list[str]] = {}
        for ref in refs:
            region = ref.region or (region_of_zone(ref.zone) if ref.zone else "")
            for r in [region] if region else self._regions:
                ids = out.setdefault(r, [])
                if ref.id not in ids:
                    ids.append(ref.id)
        return out

    def _describe(
        self,
        region: str,
        filter_sets: Iterable[dict[str, Any]],
        now: datetime,
        extra: Sequence[dict[str, Any]] = (),
    ) -> list[Instance]:
        """describe_instances with filters (never InstanceIds: one unknown id fails them all)."""
        ec2 = self._api.ec2(region)
        out: list[Instance] = []
        for f in filter_sets:
            filters = [f, *extra]
            raws = self._api.call(
                f"describe_instances in {region}",
                lambda filters=filters: [  # type: ignore[misc]
                    i
                    for r in paged(ec2, "describe_instances", "Reservations", Filters=filters)
                    for i in r.get("Instances", [])
                ],
            )
            out.extend(to_instance(raw, now, region) for raw in raws)
        return out

    def list_tagged(self, owner: str) -> list[TaggedResource]:
        """Our instances (any state but terminated) and unattached volumes, every region."""
        now = self._api.now()
        out: list[TaggedResource] = []
        for region in self._regions:
            instances = self._describe(
                region,
                [{"Name": f"tag:{TAG_OWNER}", "Values": [owner]}],
                now,
                extra=[{"Name": "instance-state-name", "Values": list(LISTED_STATES)}],
            )
            out.extend(
                TaggedResource(i.ref, dict(i.tags), i.live, i.launched_at) for i in instances
            )
            out.extend(self._loose_volumes(region, owner))
            out.extend(self._groups(region, owner))
        return out

    def _groups(self, region: str, owner: str) -> list[TaggedResource]:
        """Our gangs' placement groups (deleted by leak collection once their attempt ended)."""
        if region in self._no_groups:
            return []
        ec2 = self._api.ec2(region)
        try:
            raws = self._api.call(
                f"describe_placement_groups in {region}",
                lambda: ec2.describe_placement_groups(
                    Filters=[{"Name": f"tag:{TAG_OWNER}", "Values": [owner]}]
                ).get("PlacementGroups", []),
            )
        except Exception as exc:
            # Groups hold no instances once their gang ended and cost nothing: a listing
            # that fails must not hide the instances and volumes listed above. Not asked
            # again in this region by this process (an endpoint without placement groups).
            self._no_groups.add(region)
            self._api.emit(f"aws: cannot list placement groups in {region}: {str(exc)[:200]}")
            return []
        out = []
        for g in raws:
            if g.get("State") in ("deleting", "deleted"):
                continue
            tags = {t["Key"]: t["Value"] for t in g.get("Tags", [])}
            ref = ResourceRef(g["GroupName"], region, kind=ResourceKind.PLACEMENT_GROUP)
            out.append(TaggedResource(ref, tags, True))
        return out

    def _loose_volumes(self, region: str, owner: str) -> list[TaggedResource]:
        """Volumes we tagged at launch that outlived their instance (DeleteOnTermination off
        in the AMI's mappings): one cheap call per region."""
        ec2 = self._api.ec2(region)
        raws = self._api.call(
            f"describe_volumes in {region}",
            lambda: paged(
                ec2, "describe_volumes", "Volumes",
                Filters=[{"Name": f"tag:{TAG_OWNER}", "Values": [owner]},
                         {"Name": "status", "Values": ["available"]}],
            ),
        )  # fmt: skip
        return [volume_resource(v, region) for v in raws]

    def find_by_token(self, token: str, region: str = "") -> list[Instance]:
        ct = client_token(token)
        for r in [region] if region else self._regions:
            found = self._by_token(r, ct)
            if found:
                return found
        return []

    def _by_token(self, region: str, ct: str) -> list[Instance]:
        # By tag rather than the `client-token` filter: the tag is written atomically with the
        # instance (TagSpecifications), and the filter is missing from moto.
        now = self._api.now()
        found = self._describe(region, [{"Name": f"tag:{TAG_TOKEN}", "Values": [ct]}], now)
        found.sort(key=lambda i: (i.node, i.id))
        self._apply_notices(found, now)
        return found

    def _apply_notices(self, instances: Sequence[Instance], now: datetime) -> None:
        if self._notices is None or not instances:
            return
        warned, errors = self._notices.poll(now)
        for region, exc in errors:
            self._api.emit(
                f"aws: cannot read the interruption queue of {region}: {error_code(exc)}: "
                f"{mask_message(str(exc), self._api.secrets())}"
            )
        early = self._notices.early()
        for inst in instances:
            if inst.state is InstanceState.ENDED:
                continue
            at = warned.get(inst.id)
            if at is not None:
                inst.notice_at = at
            signal = early.get(inst.id)
            if signal is not None:
                inst.early_signal_at = signal

    # ----------------------------------------------------------------- terminate

    def terminate(self, refs: Sequence[ResourceRef]) -> None:
        """Terminate instances and delete volumes; gone ones are not an error."""
        instances = [r for r in refs if r.kind is ResourceKind.INSTANCE]
        for ref in refs:
            if ref.kind is ResourceKind.DISK:
                self._delete_volume(ref)
            elif ref.kind is ResourceKind.PLACEMENT_GROUP:
                self._delete_group(ref)
        if not instances:
            return
        for region, ids in self._by_region(instances).items():
            self._terminate_ids(region, ids)

    def _terminate_ids(self, region: str, ids: list[str]) -> None:
        """TerminateInstances is idempotent for ended instances but fails whole for one id
        it does not know; then each id of that chunk is tried alone. No describe first: an
        id too fresh to be described can usually be terminated already."""
        ec2 = self._api.ec2(region)
        what = f"terminate_instances in {region}"
        for chunk in chunks(ids):
            try:
                ec2.terminate_instances(InstanceIds=chunk)
            except ClientError as exc:
                if not error_code(exc).startswith("InvalidInstanceID"):
                    raise translate(exc, what=what, secrets=self._api.secrets) from None
                if len(chunk) > 1:  # gone, malformed, or in another region: not an error
                    for iid in chunk:
                        self._terminate_ids(region, [iid])
            except BotoCoreError as exc:
                raise translate(exc, what=what, secrets=self._api.secrets) from None

    def _delete_group(self, ref: ResourceRef) -> None:
        ec2 = self._api.ec2(ref.region or self._regions[0])
        try:
            ec2.delete_placement_group(GroupName=ref.id)
        except ClientError as exc:
            code = error_code(exc)
            if code in ("InvalidPlacementGroup.Unknown", "InvalidPlacementGroup.InUse"):
                return  # gone, or its instances are still ending: the next listing decides
            raise translate(exc, what="delete_placement_group", secrets=self._api.secrets) from None
        except BotoCoreError as exc:
            raise translate(exc, what="delete_placement_group", secrets=self._api.secrets) from None

    def _delete_volume(self, ref: ResourceRef) -> None:
        region = ref.region or (region_of_zone(ref.zone) if ref.zone else "")
        for r in [region] if region else self._regions:
            ec2 = self._api.ec2(r)
            try:
                ec2.delete_volume(VolumeId=ref.id)
                return
            except ClientError as exc:
                code = error_code(exc)
                if code.startswith("InvalidVolume"):
                    continue  # gone (or not in this region)
                if code == "VolumeInUse":
                    return  # attached again: not loose; the next listing decides
                raise translate(
                    exc, what=f"delete_volume in {r}", secrets=self._api.secrets
                ) from None
            except BotoCoreError as exc:
                raise translate(
                    exc, what=f"delete_volume in {r}", secrets=self._api.secrets
                ) from None


def max_price_text(usd: float) -> str:
    """A price as EC2 takes MaxPrice: a decimal string, at most 5 places (as the Spot price
    history reports prices), no exponent."""
    return f"{usd:.5f}".rstrip("0").rstrip(".")
