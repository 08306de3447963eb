"""Roles whose members are DingTalk departments, on the fake DingTalk: the contact API lookup and the role it grants."""

from __future__ import annotations

from adapters.dingtalk.departments import DingTalkDepartments
from adapters.dingtalk.openapi import DingTalkOpenAPI
from botgateway.access import NoGroups
from botgateway.principal import Principal
from tests.adapters.groups import attach_group_resolver
from tests.adapters.log_lines import captured_log
from tests.fakes.dingtalk import FakeDingTalk
from tools.demo.script import Script

DBA = "dingtalk:dept:42"
USER_GET = "/topapi/v2/user/get"

ACCESS = {
    "default_role": "none",
    "roles": {"dba": {"members": [DBA], "tools": ["*"]}},
}


class Clock:
    """A clock the test moves by hand (no sleeping for a TTL)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _resolver(fake: FakeDingTalk, clock: Clock) -> tuple[DingTalkOpenAPI, DingTalkDepartments]:
    api = DingTalkOpenAPI(client_id=fake.client_id, client_secret=fake.client_secret, base_url=fake.base_url)
    return api, DingTalkDepartments(api, frozenset({DBA, "dingtalk:dept:7"}), ttl_s=300,
                                    oapi_base_url=fake.base_url, clock=clock)


async def test_an_askers_departments_are_fetched_once_per_ttl_with_the_adapters_token() -> None:
    async with FakeDingTalk() as fake:
        fake.departments = {"dba01": [42, 99], "dev01": [99]}
        clock = Clock()
        api, resolver = _resolver(fake, clock)
        try:
            assert (await resolver.resolve(Principal.of("dingtalk", "dba01"))).groups == {DBA}  # 99: no role names it
            assert (await resolver.resolve(Principal.of("dingtalk", "dba01"))).groups == {DBA}
            assert (await resolver.resolve(Principal.of("dingtalk", "dev01"))).groups == frozenset()
            assert (await resolver.resolve(Principal.of("dingtalk", "gone01"))).groups == frozenset()  # no such user
            calls = [c for c in fake.calls if c.path == USER_GET]
            assert [c.body["userid"] for c in calls] == ["dba01", "dev01", "gone01"]
            assert {c.token for c in calls} == set(fake.tokens_issued) and len(fake.tokens_issued) == 1

            fake.departments["dba01"] = [99]  # moved to another department
            clock.now += 301
            assert (await resolver.resolve(Principal.of("dingtalk", "dba01"))).groups == frozenset()
        finally:
            await api.aclose()


async def test_an_expired_token_is_refreshed_once_and_the_lookup_answers() -> None:
    async with FakeDingTalk() as fake:
        fake.departments = {"dba01": [42]}
        api, resolver = _resolver(fake, Clock())
        try:
            await api.access_token()
            fake.expire_tokens()
            assert (await resolver.resolve(Principal.of("dingtalk", "dba01"))).groups == {DBA}
            assert len(fake.tokens_issued) == 2
        finally:
            await api.aclose()


async def test_senders_without_a_staff_id_and_other_organisations_are_not_looked_up() -> None:
    async with FakeDingTalk() as fake:
        api, resolver = _resolver(fake, Clock())
        try:
            for asker in (Principal.of("dingtalk", "$:LWCP_v1:$abc"), Principal.of("dingtalk", "x", external=True),
                          Principal.of("slack", "U1")):
                assert await resolver.resolve(asker) is asker
            assert [c for c in fake.calls if c.path == USER_GET] == []
        finally:
            await api.aclose()


async def test_department_membership_grants_the_role(make_env) -> None:
    env = await make_env(access_config=ACCESS)
    assert isinstance(env.adapter.groups, NoGroups)  # nothing is looked up until the policy names a department
    attach_group_resolver(env.adapter, env.config)  # as ``botgateway run`` does
    env.fake.departments = {"dba01": [42], "dev01": [7]}

    env.llm_server.enqueue(Script.text("好的"))
    member, _ = await env.ask("主库状态？", staff_id="dba01")
    assert (await env.finished(member)).outcome == "done"
    assert len(env.llm_server.requests) == 1

    outsider, _ = await env.ask("主库状态？", staff_id="dev01")
    assert (await env.finished(outsider)).outcome == "refused"  # default_role: none
    assert len(env.llm_server.requests) == 1
    assert (await env.adapter.resolve_principal(Principal.of("dingtalk", "dba01"))).groups == {DBA}


async def test_without_the_contact_permission_the_asker_gets_the_default_role_and_the_log_names_it(make_env) -> None:
    env = await make_env(access_config={**ACCESS, "default_role": "viewer",
                                        "roles": {**ACCESS["roles"], "viewer": {"tools": []}}})
    attach_group_resolver(env.adapter, env.config)
    env.fake.departments = {"dba01": [42]}
    env.fake.contact_permission = False

    env.llm_server.enqueue(Script.text("好的"))
    with captured_log() as lines:
        msg_id, _ = await env.ask("主库状态？", staff_id="dba01")
        assert (await env.finished(msg_id)).outcome == "done"
    [request] = env.llm_server.requests
    assert request.get("tools", []) == []  # the viewer's tools (none), not the dba's
    [warning] = [line for line in lines.problems() if line.get("event") == "groups.lookup_failed"]
    assert warning["reason"] == "no_permission"
    assert "qyapi_get_member" in warning["advice"] and "成员信息读权限" in warning["advice"]
