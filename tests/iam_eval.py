"""A small, faithful evaluator of AWS IAM policies for the grant's tests: identity policies, bucket (resource)
policies and a role's trust policy, each judged the way AWS documents it.

Sources (docs.aws.amazon.com/IAM/latest/UserGuide/): reference_policies_evaluation-logic.html (an explicit Deny in
any policy wins; then an Allow is needed), reference_policies_evaluation-logic-cross-account.html (across accounts
BOTH the caller's identity policy AND the resource's policy must allow; within one account either suffices),
reference_policies_elements_action.html / _resource.html / _notaction / _notresource (wildcards: `*` any run of
characters, `/` included, `?` one character; actions case-insensitive, resources case-sensitive),
reference_policies_elements_condition_operators.html (several keys or operators: all must hold; several values for
one key: any may match; a key absent from the request fails a positive operator and satisfies a negated one
(`StringNotEquals`, `ArnNotEquals`, …); `…IfExists` holds when the key is absent; Bool compares "true"/"false";
`Null` "true" holds when the key is absent, "false" when it is present),
reference_policies_elements_principal.html (an AWS principal by role ARN, by account id or `arn:aws:iam::<id>:root`;
`*` is everyone). Only the operators the grant uses are implemented; any other raises, so a new one cannot be silently
misjudged. Not modelled, as the grant uses none of them: SCPs and RCPs, permissions boundaries, session policies
(which, within one account, also limit a resource policy's grant to a role ARN), policy variables, ACLs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

DENY, ALLOW = "Deny", "Allow"


@dataclass(frozen=True)
class Request:
    """One API call as IAM sees it: who, what, on which resource, with which context keys."""

    action: str
    resource: str
    principal_arn: str = ""  # an IAM role's ARN (aws:PrincipalArn); empty for a web-identity (trust) request
    federated: str = ""  # the OIDC provider's ARN, for sts:AssumeRoleWithWebIdentity
    context: dict[str, str] = field(default_factory=dict)

    @property
    def principal_account(self) -> str:
        return self.principal_arn.split(":")[4] if self.principal_arn else ""

    def key(self, name: str) -> str | None:
        """A context key's value; aws:PrincipalArn and aws:PrincipalAccount come from the principal."""
        derived = {"aws:principalarn": self.principal_arn, "aws:principalaccount": self.principal_account}
        value = derived.get(name.lower()) or None
        if value is not None:
            return value
        lowered = {k.lower(): v for k, v in self.context.items()}  # condition key names are case-insensitive
        return lowered.get(name.lower())


@cache
def _pattern(glob: str, case_sensitive: bool) -> re.Pattern[str]:
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in glob)
    return re.compile(f"^{body}$", 0 if case_sensitive else re.IGNORECASE)


def wildcard(glob: str, value: str, case_sensitive: bool = True) -> bool:
    return bool(_pattern(glob, case_sensitive).match(value))


def _list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _string_equals(want: str, got: str) -> bool:
    return want == got


def _bool(want: str, got: str) -> bool:
    return want.lower() == got.lower()


# operator → (test one policy value against the request value, negated)
OPERATORS = {
    "StringEquals": (_string_equals, False),
    "StringNotEquals": (_string_equals, True),
    "StringLike": (wildcard, False),
    "StringNotLike": (wildcard, True),
    "ArnEquals": (wildcard, False),  # ArnEquals and ArnLike both take wildcards
    "ArnLike": (wildcard, False),
    "ArnNotEquals": (wildcard, True),
    "ArnNotLike": (wildcard, True),
    "Bool": (_bool, False),
    "Null": (_bool, False),  # special-cased in condition_holds: it tests the key's presence, not its value
}


def condition_holds(condition: dict, request: Request) -> bool:
    for operator, keys in condition.items():
        base, if_exists = (operator[: -len("IfExists")], True) if operator.endswith("IfExists") else (operator, False)
        if base not in OPERATORS:
            raise NotImplementedError(f"condition operator {operator!r} is not implemented by tests/iam_eval.py")
        test, negated = OPERATORS[base]
        for key, wanted in keys.items():
            got = request.key(key)
            if base == "Null":  # whether the key is absent: "true" wants it absent, "false" present
                ok = any((got is None) == (str(w).lower() == "true") for w in _list(wanted))
            elif got is None:
                ok = if_exists or negated
            else:
                matched = any(test(w, got) for w in _list(wanted))
                ok = not matched if negated else matched
            if not ok:
                return False
    return True


def _principal_matches(principal: str | dict, request: Request) -> bool:
    if principal == "*":
        return True
    assert isinstance(principal, dict), principal
    for kind, values in principal.items():
        for value in _list(values):
            if value == "*":
                return True
            if kind == "AWS" and request.principal_arn:
                if value == request.principal_arn:
                    return True
                if value in (request.principal_account, f"arn:aws:iam::{request.principal_account}:root"):
                    return True
            if kind == "Federated" and value == request.federated:
                return True
    return False


def statement_applies(st: dict, request: Request, resource_policy: bool) -> bool:
    if "Action" in st:
        if not any(wildcard(a, request.action, case_sensitive=False) for a in _list(st["Action"])):
            return False
    elif any(wildcard(a, request.action, case_sensitive=False) for a in _list(st["NotAction"])):
        return False
    if "Resource" in st:
        if not any(wildcard(r, request.resource) for r in _list(st["Resource"])):
            return False
    elif "NotResource" in st and any(wildcard(r, request.resource) for r in _list(st["NotResource"])):
        return False
    if resource_policy:
        if "Principal" in st:
            if not _principal_matches(st["Principal"], request):
                return False
        elif _principal_matches(st["NotPrincipal"], request):
            return False
    return condition_holds(st.get("Condition", {}), request)


def decide(policy: dict, request: Request, resource_policy: bool = False) -> str | None:
    """Deny, Allow, or None (nothing applies: an implicit deny) for one policy."""
    effects = {st["Effect"] for st in _list_statements(policy) if statement_applies(st, request, resource_policy)}
    return DENY if DENY in effects else ALLOW if ALLOW in effects else None


def _list_statements(policy: dict) -> list[dict]:
    st = policy["Statement"]
    return [st] if isinstance(st, dict) else st


def allowed(request: Request, identity: dict, resource: dict | None, resource_account: str) -> bool:
    """An S3 (or KMS) call by a role: explicit Deny anywhere wins; across accounts both policies must allow."""
    request = Request(
        request.action,
        request.resource,
        request.principal_arn,
        request.federated,
        {"aws:ResourceAccount": resource_account, **request.context},
    )
    ident = decide(identity, request)
    res = decide(resource, request, resource_policy=True) if resource else None
    if DENY in (ident, res):
        return False
    if request.principal_account == resource_account:
        return ALLOW in (ident, res)
    return ident == ALLOW and res == ALLOW


def may_assume(trust: dict, request: Request) -> bool:
    """sts:AssumeRoleWithWebIdentity against a role's trust policy (the only policy that decides it)."""
    return decide(trust, request, resource_policy=True) == ALLOW
