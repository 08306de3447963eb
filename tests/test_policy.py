"""The access policy, table-driven: roles × channels × guardrails × tools × scopes, externals, groups, defaults."""

from __future__ import annotations

import pytest

from botgateway.access import LOCAL_ADMIN_ROLE, Place, decide
from botgateway.config import ConfigError, parse_config
from botgateway.config.access import DEFAULT_ACCESS, AccessConfig
from botgateway.grant import Limits, Scope
from botgateway.principal import Principal

TOOLS = ["find_server", "list_servers", "search_logs", "ip_lookup", "k8s__get_pods", "k8s__delete_pod", "k8s__restart_deploy"]

POLICY = AccessConfig.model_validate({
    "default_role": "viewer",
    "external_users": "deny",
    "channels": {"allow": ["slack:C0OPS", "slack:C0PUBLIC", "dingtalk:cidOPS"], "direct_messages": True},
    "roles": {
        "admin": {"members": ["slack:U01ADMIN"], "tools": ["*"], "approve": True, "limits": {"turns_per_minute": 0}},
        "oncall": {"members": ["slack:S0ONCALL", "dingtalk:dept:42"], "tools": ["find_server", "list_servers", "search_*", "k8s__get_*"],
                   "scopes": [{"provider": "aliyun", "account": "prod"}, {"provider": "inventory"}]},
        "viewer": {"tools": ["find_server", "search_*"], "scopes": [{"tags": {"env": "!prod"}}]},
    },
    "guardrails": {"slack:C0PUBLIC": {"tools": ["find_server"]}},
    "approvals": {"tools": ["k8s__delete_*", "*__restart*"], "timeout_s": 300},
})

ALICE = Principal.of("slack", "U01ADMIN", team="T1")
BOB_ONCALL = Principal.of("slack", "U02", team="T1", groups=frozenset({"slack:S0ONCALL"}))
CAROL = Principal.of("slack", "U03", team="T1")
EXTERNAL = Principal.of("slack", "U09", team="TOTHER", external=True)
DING_ONCALL = Principal.of("dingtalk", "manager42", groups=frozenset({"dingtalk:dept:42"}))
LOCAL = Principal.of("terminal", "ops")
OPS, PUBLIC, RANDOM, DM = Place(channel="slack:C0OPS"), Place(channel="slack:C0PUBLIC"), Place(channel="slack:C0RANDOM"), Place(channel="slack:D1", direct=True)

CASES = [
    # (name, principal, place, roles or refusal, tools offered)
    ("admin in ops gets every tool", ALICE, OPS, ("admin",), set(TOOLS)),
    ("admin capped by the public guardrail", ALICE, PUBLIC, ("admin",), {"find_server"}),
    ("oncall by slack group", BOB_ONCALL, OPS, ("oncall",), {"find_server", "list_servers", "search_logs", "k8s__get_pods"}),
    ("oncall by dingtalk department", DING_ONCALL, Place(channel="dingtalk:cidOPS"), ("oncall",),
     {"find_server", "list_servers", "search_logs", "k8s__get_pods"}),
    ("unlisted user gets default_role", CAROL, OPS, ("viewer",), {"find_server", "search_logs"}),
    ("guardrail intersects viewer", CAROL, PUBLIC, ("viewer",), {"find_server"}),
    ("channel outside the allow-list", CAROL, RANDOM, "channel", set()),
    ("direct messages allowed", CAROL, DM, ("viewer",), {"find_server", "search_logs"}),
    ("external user denied", EXTERNAL, OPS, "external", set()),
    ("terminal user is admin anywhere", LOCAL, Place(channel="local:cli"), (LOCAL_ADMIN_ROLE,), set(TOOLS)),
]


@pytest.mark.parametrize(("name", "principal", "place", "expected", "tools"), CASES, ids=[c[0] for c in CASES])
def test_policy_table(name: str, principal: Principal, place: Place, expected: object, tools: set[str]) -> None:
    decision = decide(POLICY, principal, place, TOOLS)
    if isinstance(expected, str):
        assert decision.refusal == expected and decision.grant is None
        return
    assert decision.grant is not None and decision.grant.roles == expected
    assert decision.grant.tools == tools


def test_several_roles_add_up_and_approvals_cover_only_offered_tools() -> None:
    both = Principal.of("slack", "U01ADMIN", team="T1", groups=frozenset({"slack:S0ONCALL"}))
    grant = decide(POLICY, both, OPS, TOOLS).grant
    assert grant is not None and grant.roles == ("admin", "oncall") and grant.tools == set(TOOLS)
    assert grant.approver and grant.approval == {"k8s__delete_pod", "k8s__restart_deploy"}
    assert grant.scopes == ()  # admin is unscoped, so the union is unrestricted
    assert grant.limits.turns_per_minute == 0
    oncall = decide(POLICY, BOB_ONCALL, OPS, TOOLS).grant
    assert oncall is not None and not oncall.approver and oncall.approval == frozenset()
    assert oncall.scopes == (Scope(provider="aliyun", account="prod"), Scope(provider="inventory"))


def test_scopes_and_limits_reach_the_grant() -> None:
    grant = decide(POLICY, CAROL, OPS, TOOLS, limits=Limits(turns_per_minute=6, tokens_per_day=200000)).grant
    assert grant is not None and grant.scopes == (Scope(tags={"env": "!prod"}),)
    assert grant.limits == Limits(turns_per_minute=6, tokens_per_day=200000)
    admin = decide(POLICY, ALICE, OPS, TOOLS, limits=Limits(turns_per_minute=6)).grant
    assert admin is not None and admin.limits.turns_per_minute == 0  # the role's own limit (0: none) overrides


def test_default_none_refuses_the_unlisted_and_external_roles_never_come_from_wildcards() -> None:
    policy = AccessConfig.model_validate({
        "external_users": "guest",
        "roles": {"staff": {"members": ["slack:*"], "tools": ["*"]}, "guest": {"tools": ["find_server"]}},
    })
    assert decide(policy, Principal.of("dingtalk", "x"), OPS, TOOLS).refusal == "no_role"
    assert decide(policy, CAROL, OPS, TOOLS).grant.roles == ("staff",)  # type: ignore[union-attr]
    guest = decide(policy, EXTERNAL, OPS, TOOLS).grant
    assert guest is not None and guest.roles == ("guest",) and guest.tools == {"find_server"}
    no_dms = AccessConfig.model_validate({"default_role": "guest", "channels": {"direct_messages": False},
                                          "roles": {"guest": {"tools": ["*"]}}})
    assert decide(no_dms, CAROL, DM, TOOLS).refusal == "direct_messages"


def test_safe_default_without_an_access_section() -> None:
    viewer = decide(DEFAULT_ACCESS, CAROL, RANDOM, TOOLS).grant
    assert viewer is not None and viewer.tools == {"find_server", "list_servers", "search_logs", "ip_lookup"}  # no MCP tools
    assert decide(DEFAULT_ACCESS, Principal.of("dingtalk", "staff1"), Place(channel="dingtalk:cid1"), TOOLS).allowed
    assert decide(DEFAULT_ACCESS, EXTERNAL, OPS, TOOLS).refusal == "external"
    assert decide(DEFAULT_ACCESS, LOCAL, Place(channel="local:x"), TOOLS).grant.tools == set(TOOLS)  # type: ignore[union-attr]


@pytest.mark.parametrize(("access", "path"), [
    ({"default_role": "boss"}, "access"),
    ({"roles": {"x": {"members": ["U1"]}}}, "access.roles.x.members"),
    ({"roles": {"x": {"tools": ["rm -rf"]}}}, "access.roles.x.tools"),
    ({"channels": {"allow": ["C0OPS"]}}, "access.channels.allow"),
    ({"guardrails": {"C0PUBLIC": {"tools": ["*"]}}}, "access.guardrails"),
    ({"approvals": {"timeout_s": 0}}, "access.approvals.timeout_s"),
    ({"roles": {"x": {"limits": {"turns_per_minute": -1}}}}, "access.roles.x.limits.turns_per_minute"),
    ({"roles": {"x": {"scopes": [{"provider": "aliyun", "acount": "prod"}]}}}, "access.roles.x.scopes"),
])
def test_bad_policies_are_reported_with_their_key_path(access: dict[str, object], path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"access": access}, env={})
    assert any(path in line for line in caught.value.problems), caught.value.problems
