"""`spotwise doctor` for AWS: the account checked with the user's own credentials, nothing
launched. Identity (STS GetCallerIdentity); the Price List API; and in each region: the AMI
resolves, RunInstances is allowed for a real Spot offering (DryRun, with the same request a
launch sends, and once more into a placement group for gangs), CreatePlacementGroup and
TerminateInstances are allowed (DryRun; the latter on an instance carrying our owner tag,
so the tag condition is what is checked), and the region has its interruption queue.

EC2 answers a DryRun that would have succeeded with DryRunOperation (HTTP 412) and one that
is not allowed with UnauthorizedOperation; both are read here as answers, not failures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from providers.aws.errors import POLICY_FILE
from providers.aws.iam import missing_permission
from providers.aws.instance_types import chunks
from providers.aws.notices import queue_region
from providers.base import (
    TAG_ATTEMPT,
    TAG_JOB,
    TAG_OWNER,
    LaunchRequest,
    Market,
    Offering,
    ProviderError,
)
from providers.preflight import Check, Checks

if TYPE_CHECKING:
    from providers.aws.provider import AwsProvider

CLOUD = "aws"
GRANT = f"grant it: the daemon's policy is {POLICY_FILE}"
DOCTOR_GROUP = "spotwise-doctor"


def preflight(provider: AwsProvider) -> list[Check]:
    checks = Checks(CLOUD)
    api: Any = provider._api
    s = provider.settings
    ident = checks.run(
        "identity",
        lambda: api.sts().get_caller_identity(),
        "set up credentials boto3 finds (environment, `profile`, SSO or an instance role)",
    )
    if ident is None:
        return checks.items  # every later call would fail the same way
    checks.ok("identity", f"{ident.get('Arn')} (account {ident.get('Account')})")
    _pricing(checks, api)
    try:
        offers = provider.offerings()
    except ProviderError as exc:
        offers = []
        checks.problem("offerings", f"no offering could be listed: {exc}", "see the problems above")
    queues = s.queues()
    for region in s.regions:
        _image(checks, api, region)
        offer = _cheapest(offers, region)
        if offer is None:
            checks.skipped(
                f"launch permissions in {region}",
                "no GPU offering in this region to try (instance_types, subnet_ids?)",
            )
        else:
            _launch(checks, provider, offer)
        _terminate(checks, api, region, provider.owner)
        _queue(checks, api, region, queues)
    return checks.items


def _answer(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        return str(err.get("Code", "")), str(err.get("Message", ""))
    return type(exc).__name__, str(exc)


def _denied(checks: Checks, name: str, code: str, text: str) -> None:
    found = missing_permission(text)
    what = f"{found[0]} on {found[1]}" if found and found[1] else (found[0] if found else code)
    checks.problem(name, f"{code}: not allowed ({what})", GRANT)


def _dry(checks: Checks, name: str, call: Any, *, ok: str, unknown: str = "") -> None:
    """One DryRun call, its answer read as a check."""
    try:
        call()
    except (ClientError, BotoCoreError) as exc:
        code, text = _answer(exc)
        if code == "DryRunOperation":
            checks.ok(name, ok)
        elif code in ("UnauthorizedOperation", "AccessDenied"):
            _denied(checks, name, code, text)
        elif unknown and code.startswith(unknown):
            checks.skipped(name, f"{code}: EC2 checked the resource before the permission")
        else:
            checks.problem(name, f"{code}: {text[:200]}", "see the message")
        return
    checks.problem(name, "the DryRun call did not answer DryRunOperation", "see the message")


def _pricing(checks: Checks, api: Any) -> None:
    try:
        api.pricing().get_products(ServiceCode="AmazonEC2", MaxResults=1)
    except (ClientError, BotoCoreError) as exc:
        code, text = _answer(exc)
        checks.problem(
            "on-demand prices (pricing:GetProducts)",
            f"{code}: {text[:200]}; the shipped price snapshot stands in",
            GRANT if "Denied" in code or "Unauthorized" in code else "see the message",
        )
        return
    checks.ok("on-demand prices (pricing:GetProducts)", "the Price List API answers")


def _image(checks: Checks, api: Any, region: str) -> None:
    image = api.settings.ami_for(region)
    name = f"image in {region}"
    try:
        if image.startswith("resolve:ssm:"):
            param = image.removeprefix("resolve:ssm:")
            got = api.ssm(region).get_parameters(Names=[param])
            if got.get("InvalidParameters") or not got.get("Parameters"):
                checks.problem(
                    name, f"SSM parameter {param} does not exist in {region}",
                    "set [providers.aws] ami to an AMI (or SSM parameter) of this region",
                )  # fmt: skip
                return
            checks.ok(name, f"{param} -> {got['Parameters'][0].get('Value')}")
            return
        got = api.ec2(region).describe_images(ImageIds=[image])
        if not got.get("Images"):
            raise ClientError({"Error": {"Code": "InvalidAMIID.NotFound"}}, "DescribeImages")
        checks.ok(name, f"{image}: {got['Images'][0].get('Name', '')}")
    except (ClientError, BotoCoreError) as exc:
        code, text = _answer(exc)
        if code in ("UnauthorizedOperation", "AccessDenied", "AccessDeniedException"):
            _denied(checks, name, code, text)
        else:
            checks.problem(
                name, f"{image}: {code} {text[:160]}".strip(),
                "set [providers.aws] ami to an AMI (or SSM parameter) that exists here",
            )  # fmt: skip


def _cheapest(offers: list[Offering], region: str) -> Offering | None:
    here = [o for o in offers if o.region == region]
    spot = [o for o in here if o.market is Market.SPOT]
    return min(spot or here, key=lambda o: o.price_per_hour, default=None)


def _launch(checks: Checks, provider: AwsProvider, offer: Offering) -> None:
    api: Any = provider._api
    instances: Any = provider._instances
    region = offer.region
    tags = {TAG_OWNER: provider.owner, TAG_JOB: "doctor", TAG_ATTEMPT: "doctor"}
    request = LaunchRequest("spotwise-doctor", offer, ["true"], {}, tags)
    try:
        params = instances._run_params(request, "spotwise-doctor")
    except ProviderError as exc:
        checks.problem(f"launch request in {region}", str(exc), "see the message")
        return
    ec2 = api.ec2(region)
    what = f"{offer.instance_type} {offer.market.value} in {offer.zone}"
    _dry(
        checks, f"permission ec2:RunInstances ({offer.market.value}) in {region}",
        lambda: ec2.run_instances(**params, DryRun=True), ok=f"DryRun allowed: {what}",
    )  # fmt: skip
    gang = {**params, "Placement": {**params["Placement"], "GroupName": DOCTOR_GROUP}}
    _dry(
        checks, f"permission ec2:RunInstances into a placement group in {region}",
        lambda: ec2.run_instances(**gang, DryRun=True), ok="DryRun allowed (gangs)",
        unknown="InvalidPlacementGroup",
    )  # fmt: skip
    group_tags = [{"Key": k, "Value": v} for k, v in tags.items()]
    _dry(
        checks, f"permission ec2:CreatePlacementGroup in {region}",
        lambda: ec2.create_placement_group(
            GroupName=DOCTOR_GROUP, Strategy="cluster", DryRun=True,
            TagSpecifications=[{"ResourceType": "placement-group", "Tags": group_tags}],
        ),
        ok="DryRun allowed (gangs)",
    )  # fmt: skip


def _terminate(checks: Checks, api: Any, region: str, owner: str) -> None:
    name = f"permission ec2:TerminateInstances in {region}"
    ec2 = api.ec2(region)
    try:
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": f"tag:{TAG_OWNER}", "Values": [owner]},
                {"Name": "instance-state-name", "Values": ["pending", "running", "stopped"]},
            ]
        )
        ids = [i["InstanceId"] for p in pages for r in p.get("Reservations", [])
               for i in r.get("Instances", [])]  # fmt: skip
    except (ClientError, BotoCoreError) as exc:
        code, text = _answer(exc)
        _denied(checks, f"permission ec2:DescribeInstances in {region}", code, text)
        return
    if not ids:
        checks.skipped(
            name,
            f"no instance carries {TAG_OWNER}={owner} yet: TerminateInstances is allowed on "
            "a tag, so it can only be tried on one of ours (run doctor again while a job runs)",
        )
        return
    target = next(iter(chunks(sorted(ids), 1)))
    _dry(checks, name, lambda: ec2.terminate_instances(InstanceIds=target, DryRun=True),
         ok=f"DryRun allowed on {target[0]} ({TAG_OWNER}={owner})")  # fmt: skip


def _queue(checks: Checks, api: Any, region: str, queues: dict[str, str]) -> None:
    name = f"interruption queue in {region}"
    if not queues:
        checks.skipped(
            name,
            "no sqs_queue_url: interruption warnings are read on the instance only (IMDS); "
            "a queue per region tells the daemon two minutes earlier",
        )
        return
    url = queues.get(region)
    if url is None:
        checks.problem(
            name,
            "no queue for this region: EventBridge delivers a region's Spot warnings only to "
            "a target in that region",
            f'create a queue and rule in {region}; set sqs_queue_url = {{ {region} = "..." }}',
        )
        return
    named = queue_region(url)
    if named and named != region:
        checks.problem(
            name, f"{url} is in {named}, not {region}: EventBridge cannot deliver there",
            f"create a queue in {region} for its rule",
        )  # fmt: skip
        return
    try:
        attrs = (
            api.sqs(region)
            .get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn", "Policy"])
            .get("Attributes", {})
        )
    except (ClientError, BotoCoreError) as exc:
        code, text = _answer(exc)
        if "Denied" in code or "Unauthorized" in code:
            _denied(checks, name, code, text)
        else:
            checks.problem(name, f"{url}: {code} {text[:160]}", "create the queue, or fix the URL")
        return
    checks.ok(name, str(attrs.get("QueueArn", url)))
