"""IAM for the AWS tests: moto enforces no IAM, so this fake does, on the client side.

Installed on a boto3.Session (`IamFake(policy).install(session)`), it sees every call the
adapter makes (botocore's before-parameter-build and before-call events), records it, works
out what IAM must allow for it (providers/aws/iam.py, the Service Authorization Reference
table) and evaluates the given policy document: a call the policy does not allow is answered
the way AWS answers it, before it reaches moto, and a DryRun call that is allowed is answered
`DryRunOperation` (HTTP 412), as EC2 does ("Request would have succeeded, but DryRun flag is
set."). Resource tags for the conditions on aws:ResourceTag come from the calls it saw
(RunInstances' TagSpecifications, CreateTags, CreatePlacementGroup).

The error bodies are AWS's: EC2's UnauthorizedOperation message in the format the IAM User
Guide documents ("Troubleshoot access denied error messages": "User: <arn> is not authorized
to perform: <action> on resource: <arn> because no identity-based policy allows the <action>
action"), followed by the encoded authorization message EC2 appends; SSM's and SQS's
AccessDeniedException / AccessDenied in the same wording. The evaluator understands what our
policy uses: Allow and Deny, Action and Resource wildcards, and the StringEquals, StringLike
and ForAllValues:StringEquals condition operators; a condition key missing from the request
fails the condition, as in IAM.

It also answers what moto does not have: SSM's public parameters (`ssm_parameters`, for the
default `resolve:ssm:` AMI, which moto refuses to store under /aws/service/) and a DryRun of
CreatePlacementGroup.
"""

from __future__ import annotations

import copy
import fnmatch
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from botocore.awsrequest import AWSResponse

from providers.aws.iam import Need, needs

ACCOUNT = "123456789012"  # moto's default account, and the policy's placeholder
CALLER = f"arn:aws:sts::{ACCOUNT}:assumed-role/spotwise-daemon/i-0f1e2d3c4b5a69788"


class _Raw:
    def stream(self, **_: Any) -> Iterator[bytes]:
        yield b""


def _listify(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


def _wild(pattern: str, value: str, *, case: bool = True) -> bool:
    """IAM wildcard match: * and ? only ('[' is literal)."""
    p = pattern.replace("[", "[[]")
    if not case:
        return fnmatch.fnmatchcase(value.lower(), p.lower())
    return fnmatch.fnmatchcase(value, p)


def _ctx(context: Mapping[str, Any], key: str) -> Any:
    for k, v in context.items():
        if k.lower() == key.lower():
            return v
    return None


def _condition(op: str, key: str, wanted: list[Any], context: Mapping[str, Any]) -> bool:
    got = _ctx(context, key)
    if got is None:
        return False
    values = [str(v) for v in _listify(got)]
    want = [str(w) for w in wanted]
    if op == "StringEquals":
        return any(v in want for v in values)
    if op == "StringLike":
        return any(_wild(w, v) for v in values for w in want)
    if op == "ForAllValues:StringEquals":
        return all(v in want for v in values)
    if op == "ForAnyValue:StringEquals":
        return any(v in want for v in values)
    raise ValueError(f"the IAM fake does not understand the condition operator {op}")


def applies(statement: Mapping[str, Any], need: Need) -> bool:
    if not any(_wild(a, need.action, case=False) for a in _listify(statement.get("Action"))):
        return False
    resources = _listify(statement.get("Resource"))
    if need.resource == "*":
        if "*" not in resources:
            return False
    elif not any(_wild(r, need.resource) for r in resources):
        return False
    for op, block in (statement.get("Condition") or {}).items():
        for key, wanted in block.items():
            if not _condition(op, key, _listify(wanted), need.context):
                return False
    return True


def allowed(policy: Mapping[str, Any], need: Need) -> bool:
    statements = _listify(policy.get("Statement"))
    if any(s.get("Effect") == "Deny" and applies(s, need) for s in statements):
        return False
    return any(s.get("Effect") == "Allow" and applies(s, need) for s in statements)


def denial(need: Need) -> str:
    return (
        f"User: {CALLER} is not authorized to perform: {need.action} on resource: "
        f"{need.resource} because no identity-based policy allows the {need.action} action"
    )


class IamFake:
    """Evaluates `policy` on every call of the sessions it is installed on; `calls` records
    (service, operation, api params, region) and `denied` the needs it refused."""

    def __init__(self, policy: Mapping[str, Any], account: str = ACCOUNT) -> None:
        self.policy = policy
        self.account = account
        self.calls: list[tuple[str, str, dict[str, Any], str]] = []
        self.needs: list[Need] = []
        self.denied: list[Need] = []
        self.ssm_parameters: dict[str, str] = {}
        self.tags: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ wiring

    def install(self, session: Any) -> IamFake:
        events = session.events
        events.register("before-parameter-build", self._keep_params)
        events.register("before-call", self._before_call)
        events.register("after-call.ec2.RunInstances", self._after_run)
        events.register("after-call.ec2.DescribeVolumes", self._after_volumes)
        return self

    @staticmethod
    def _keep_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["spotwise_api_params"] = copy.deepcopy(params)

    # ------------------------------------------------------------------ the check

    def _before_call(self, model: Any, context: dict[str, Any], **_: Any) -> Any:
        service = model.service_model.endpoint_prefix
        service = {"api.pricing": "pricing"}.get(service, service)
        op = model.name
        params = context.get("spotwise_api_params", {})
        region = str(context.get("client_region") or "us-east-1")
        with self._lock:
            self.calls.append((service, op, params, region))
            if op == "CreateTags":  # tags written after launch count from now on
                self._remember_tags(params)
            got = needs(service, op, params, region=region, account=self.account,
                        tags_of=self.tags)  # fmt: skip
            self.needs.extend(got)
            refused = [n for n in got if not allowed(self.policy, n)]
            self.denied.extend(refused)
        if refused:
            return self._refuse(service, refused[0])
        if params.get("DryRun"):
            return _answer(412, {"Error": {"Code": "DryRunOperation", "Message": (
                "Request would have succeeded, but DryRun flag is set.")}})  # fmt: skip
        if service == "ec2" and op == "CreatePlacementGroup":
            with self._lock:
                name = str(params.get("GroupName", ""))
                for spec in params.get("TagSpecifications") or []:
                    tags = {t["Key"]: t.get("Value", "") for t in spec.get("Tags") or []}
                    self.tags[name] = tags
        if service == "ssm" and op == "GetParameters":
            return self._ssm(params)
        return None

    def _refuse(self, service: str, need: Need) -> Any:
        if service == "ec2":
            message = (
                f"You are not authorized to perform this operation. {denial(need)}. "
                "Encoded authorization failure message: AbCdEf0123456789-encoded"
            )
            return _answer(403, {"Error": {"Code": "UnauthorizedOperation", "Message": message}})
        code = "AccessDenied" if service == "sqs" else "AccessDeniedException"
        return _answer(400 if service != "sqs" else 403,
                       {"Error": {"Code": code, "Message": denial(need)}})  # fmt: skip

    def _ssm(self, params: Mapping[str, Any]) -> Any:
        names = list(params.get("Names") or [])
        found = [n for n in names if n in self.ssm_parameters]
        return _answer(200, {
            "Parameters": [
                {"Name": n, "Type": "String", "Value": self.ssm_parameters[n], "Version": 1,
                 "DataType": "aws:ec2:image", "ARN": f"arn:aws:ssm:us-east-1::parameter{n}"}
                for n in found
            ],
            "InvalidParameters": [n for n in names if n not in self.ssm_parameters],
        })  # fmt: skip

    # ------------------------------------------------------------------ resource tags

    def _remember_tags(self, params: Mapping[str, Any]) -> None:
        new = {t["Key"]: t.get("Value", "") for t in params.get("Tags") or []}
        for rid in params.get("Resources") or []:
            self.tags.setdefault(rid, {}).update(new)

    def _after_run(self, parsed: Mapping[str, Any], context: dict[str, Any], **_: Any) -> None:
        params = context.get("spotwise_api_params", {})
        by_type = {
            spec.get("ResourceType"): {t["Key"]: t.get("Value", "") for t in spec.get("Tags") or []}
            for spec in params.get("TagSpecifications") or []
        }
        with self._lock:
            for inst in parsed.get("Instances") or []:
                self.tags[inst["InstanceId"]] = dict(by_type.get("instance", {}))

    def _after_volumes(self, parsed: Mapping[str, Any], **_: Any) -> None:
        with self._lock:
            for vol in parsed.get("Volumes") or []:
                tags = {t["Key"]: t.get("Value", "") for t in vol.get("Tags") or []}
                self.tags.setdefault(vol["VolumeId"], {}).update(tags)

    def operations(self) -> set[tuple[str, str]]:
        with self._lock:
            return {(s, o) for s, o, _, _ in self.calls}


def _answer(status: int, parsed: dict[str, Any]) -> tuple[AWSResponse, dict[str, Any]]:
    parsed.setdefault("ResponseMetadata", {})["HTTPStatusCode"] = status
    return AWSResponse("http://127.0.0.1/", status, {}, _Raw()), parsed
