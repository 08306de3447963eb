"""How an estate record reads in the demo's answers, in English or Chinese: its kind, where it lives, its key facts.

Only what the record holds is said; a fact the record lacks is left out, never guessed.
"""

from __future__ import annotations

from tools.estate.resource import Listener, Resource, kind_label
from tools.server_record import provider_label

__all__ = ["detail_facts", "kind_word", "listener_text", "name_and_id", "place", "resource_line"]

_ZH_KINDS = {
    "server": "服务器", "database": "数据库", "cache": "缓存", "load_balancer": "负载均衡", "security_group": "安全组",
    "ip": "弹性 IP", "nat_gateway": "NAT 网关", "dns_record": "DNS 记录", "bucket": "存储桶", "k8s_node": "Kubernetes 节点",
    "pod": "Pod", "workload": "工作负载", "k8s_service": "Kubernetes 服务", "ingress": "Ingress",
}  # fmt: skip


def kind_word(kind: str, zh: bool, *, plural: bool = False) -> str:
    """"load balancer" / "负载均衡"; ``plural`` gives "load balancers" (Chinese has no plural)."""
    if zh:
        return _ZH_KINDS.get(kind, kind_label(kind))
    label = kind_label(kind)
    return label + "s" if plural and not label.endswith("s") else label


def place(provider: str, account: str, region: str) -> str:
    """"Static inventory (on-prem), idc-shanghai": the provider, its account and the region, as far as known."""
    text = provider_label(provider) + (f" ({account})" if account else "")
    return text + (f", {region}" if region else "")


def name_and_id(resource: Resource) -> str:
    """"**orders-db** (`rds-orders-01`)", or the id alone when it is the name."""
    if resource.name and resource.name != resource.id:
        return f"**{resource.name}** (`{resource.id}`)"
    return f"**{resource.name or resource.id}**"


def detail_facts(resource: Resource, zh: bool) -> str:
    """The facts of its kind: engine and port, type and scheme, a record's value, a bucket's access, replicas…"""
    d = resource.details
    if resource.kind == "dns_record":
        return f"{d.get('type', '?')} → {d.get('value', '?')}" + (f" (TTL {d['ttl']})" if d.get("ttl") else "")
    if resource.kind == "bucket" and d.get("public"):
        public = d["public"] == "yes"
        text = ("公开" if public else "私有") if zh else ("public" if public else "not public")
        return text + (f", ACL {d['acl']}" if d.get("acl") else "")
    engine = " ".join(d[k] for k in ("engine", "version") if d.get(k))
    labels = (("class", "规格", "class"), ("type", "类型", "type"), ("scheme", "网络类型", "scheme"), ("port", "端口", "port"),
              ("replicas", "副本", "replicas"), ("restarts", "重启次数", "restarts"), ("reason", "原因", "reason"),
              ("node", "节点", "node"))
    parts = [engine] if engine else []
    parts += [f"{zh_label if zh else en_label} {d[key]}" for key, zh_label, en_label in labels if d.get(key)]
    return ", ".join(parts)


def listener_text(listener: Listener, zh: bool) -> str:
    """"https:443 → prod-web-01:8443 healthy, prod-web-02:8443 unhealthy" (or "no backend")."""
    backends = ", ".join(f"{b.target}" + (f":{b.port}" if b.port else "") + (f" {b.health}" if b.health else "")
                         for b in listener.backends[:8])
    if not backends:
        backends = "没有后端" if zh else "no backend"
    return f"{listener.protocol}:{listener.port} → {backends}"


def resource_line(resource: Resource, zh: bool, *, kind: bool = True) -> str:
    """One line: kind, name and id, state, facts, first addresses and where it lives."""
    parts = [f"{kind_word(resource.kind, zh)} {name_and_id(resource)}" if kind else name_and_id(resource)]
    if resource.state:
        parts.append(resource.state)
    facts = detail_facts(resource, zh)
    if facts:
        parts.append(facts)
    addresses = (resource.private_ips + resource.public_ips)[:3]
    if addresses:
        parts.append(", ".join(addresses))
    for rel, zh_word, en_word in (("attached_to", "绑定到", "attached to"), ("runs_on", "运行在", "on node")):
        targets = ", ".join(link.target for link in resource.links_of(rel))
        if targets and not (rel == "runs_on" and resource.details.get("node")):
            parts.append(f"{zh_word if zh else en_word} {targets}")
    parts.append(place(resource.provider, resource.account, resource.region))
    return " · ".join(parts)
