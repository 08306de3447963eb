"""The web's pictures: the shelf keeps them for their asker, for a while and within its bytes; the links' address is
the gateway's as the client reached it, believing a proxy's forwarded host only from a trusted proxy."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import make_mocked_request

from adapters.web.artifact_shelf import ArtifactShelf, picture_ref
from adapters.web.client_addr import TrustedProxies
from adapters.web.public_url import public_origin
from botgateway.artifacts import Artifact


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def chart(ref: str, size: int = 1000) -> Artifact:
    return Artifact(ref=ref, title="cpu", png=b"p" * size, width=8, height=4)


def test_a_picture_is_kept_for_its_owner_until_it_expires() -> None:
    clock = Clock()
    shelf = ArtifactShelf(keep_s=60.0, clock=clock)
    assert shelf.keep(chart("chart-a"), "api:ops")
    assert not shelf.keep(chart("chart-a"), "api:dash")  # a reference kept for one asker is not handed to another
    kept = shelf.find("chart-a")
    assert kept is not None and kept.owner == "api:ops" and kept.png(dark=True) == b"p" * 1000  # no dark: light
    clock.now += 61
    assert shelf.find("chart-a") is None and len(shelf) == 0


def test_the_shelf_drops_the_least_recently_used_pictures_past_its_bytes() -> None:
    shelf = ArtifactShelf(max_bytes=6000, clock=Clock())  # each picture here weighs its bytes + 512
    for ref in ("chart-a", "chart-b", "chart-c"):
        assert shelf.keep(chart(ref), "api:ops")
    assert shelf.find("chart-a") is not None  # used: the oldest unused one goes first
    assert shelf.keep(chart("chart-d", 2000), "api:ops")
    assert shelf.find("chart-b") is None and {r for r in ("chart-a", "chart-c", "chart-d") if shelf.find(r)} == {
        "chart-a", "chart-c", "chart-d"}
    assert not shelf.keep(chart("chart-e", 6000), "api:ops")  # larger than the whole shelf: refused, none dropped
    assert len(shelf) == 3


def test_only_a_pictures_file_name_names_a_reference() -> None:
    assert picture_ref("chart-9f2c.png") == "chart-9f2c"
    assert [picture_ref(name) for name in ("chart-9f2c", "chart-9f2c.svg", ".png", "../x.png", "a b.png")] == [
        None] * 5


class Peer:
    """The connection a request came over: its peer's address."""

    def __init__(self, address: str) -> None:
        self.address = address

    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"peername": (self.address, 5555), "sockname": ("127.0.0.1", 8080)}.get(name, default)


def request(peer: str, **headers: str) -> Any:
    return make_mocked_request("GET", "/", headers={k.replace("_", "-"): v for k, v in headers.items()},
                               transport=Peer(peer))


def test_a_links_address_is_the_gateways_as_the_client_reached_it() -> None:
    proxies = TrustedProxies(["10.0.0.0/8"])
    direct = request("192.0.2.7", Host="gw.internal:8080", X_Forwarded_Host="evil.example")
    assert public_origin(direct, proxies) == "http://gw.internal:8080"  # not a proxy: its forwarded host is ignored
    behind = request("10.1.2.3", Host="gw:8080", X_Forwarded_Host="ops.example.com", X_Forwarded_Proto="https")
    assert public_origin(behind, proxies) == "https://ops.example.com"
    odd = request("10.1.2.3", Host="gw:8080", X_Forwarded_Host="a.example/x?y=<z>")
    assert public_origin(odd, proxies) == "http://gw:8080"  # no host name: not used
