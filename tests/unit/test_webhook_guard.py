"""The SSRF guard: create-time URL checks and delivery-time address checks.

Names are resolved through the guard's resolver seam: a fake resolver stands in for DNS
(``resolve_callback(url, settings, resolver)``), since no real DNS answers with these
addresses on demand.
"""

from __future__ import annotations

import ipaddress
import re

import pytest

from egress.config import WebhookSettings
from egress.exceptions import ConfigError
from egress.webhooks import check_callback_url
from egress.webhooks.guard import Refused, ResolveError, blocked_reason, resolve_callback

STRICT = WebhookSettings()
DEV = WebhookSettings(allow_http=True, allow_loopback=True)

#: One address of every blocked class, and the word its reason must contain.
BLOCKED = [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("::1", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("169.254.1.1", "link-local"),
    ("fe80::1", "link-local"),
    ("100.64.0.1", "CGNAT"),
    ("100.127.255.254", "CGNAT"),
    ("169.254.169.254", "metadata"),
    ("fd00:ec2::254", "metadata"),
    ("100.100.100.200", "metadata"),
    ("224.0.0.251", "multicast"),
    ("239.1.2.3", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("0.1.2.3", "reserved"),
    ("192.0.2.10", "documentation"),
    ("2001:db8::1", "documentation"),
    ("198.18.0.1", "benchmarking"),
    ("::ffff:127.0.0.1", "IPv4-mapped IPv6 address embedding 127.0.0.1, loopback"),
    ("::ffff:10.0.0.1", "IPv4-mapped IPv6 address embedding 10.0.0.1, private"),
    ("::ffff:169.254.169.254", "embedding 169.254.169.254, cloud metadata"),
    ("64:ff9b::a9fe:a9fe", "NAT64 address embedding 169.254.169.254"),
    ("2002:c0a8:0101::1", "6to4 address embedding 192.168.1.1, private"),
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "Teredo address embedding 10.0.0.1, private"),
    ("::127.0.0.1", "IPv4-compatible IPv6 address embedding 127.0.0.1"),
]

#: Notations of 127.0.0.1 / 10.0.0.1 that inet_aton (and so getaddrinfo) accepts.
ODD_ENCODINGS = [
    ("2130706433", "127.0.0.1"),
    ("0x7f000001", "127.0.0.1"),
    ("0X7F000001", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),
    ("0177.0000.0000.0001", "127.0.0.1"),
    ("127.1", "127.0.0.1"),
    ("127.0.1", "127.0.0.1"),
    ("0x7f.1", "127.0.0.1"),
    ("10.1", "10.0.0.1"),
    ("012.1", "10.0.0.1"),
    ("167772161", "10.0.0.1"),
    ("127.0.0.1.", "127.0.0.1"),
    ("0xa9fea9fe", "169.254.169.254"),
]


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


@pytest.mark.parametrize(("address", "reason"), BLOCKED)
def test_a_literal_blocked_address_is_refused_at_create_time(address: str, reason: str):
    with pytest.raises(ConfigError, match=re.escape(reason)) as info:
        check_callback_url(f"https://{_url_host(address)}/hook", STRICT)
    assert "webhooks may only call public addresses" in str(info.value)


@pytest.mark.parametrize(("host", "address"), ODD_ENCODINGS)
def test_odd_ipv4_notations_are_decoded_then_refused(host: str, address: str):
    with pytest.raises(ConfigError, match=re.escape(f"is {address}: ")):
        check_callback_url(f"https://{host}:8443/x", STRICT)


@pytest.mark.parametrize("host", ["0x08080808", "134744072", "010.8.8.8", "8.8.2056"])
def test_a_public_address_in_an_odd_notation_is_refused_too(host: str):
    with pytest.raises(ConfigError, match=re.escape("non-standard notation; write it as 8.8.8.8")):
        check_callback_url(f"https://{host}/", STRICT)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://hooks.example.com/x", "scheme 'http' is not allowed; use https"),
        ("ftp://hooks.example.com/x", "scheme 'ftp' is not allowed"),
        ("hooks.example.com/x", r"scheme '\(none\)' is not allowed"),
        ("https://user:pw@hooks.example.com/x", "user name or password"),
        ("https://token@hooks.example.com/x", "user name or password"),
        ("https:///x", "no host"),
        ("https://hooks.example.com:0/x", "port 0"),
        ("https://hooks.example.com:70000/x", "not a valid URL"),
        ("https://hooks.exa mple.com/x", "printable ASCII"),
        ("https://evil.example\\@127.0.0.1/", "printable ASCII"),
        ("https://hooks.example.com/\nx", "printable ASCII"),
        ("https://bücher.example/x", "punycode"),
        ("https://[fe80::1%25eth0]/x", "zone id"),
        ("https://%31%32%37.0.0.1/x", "zone id or an escape"),
        ("https://localhost/x", "loopback name"),
        ("https://api.localhost:8080/x", "loopback name"),
        ("https://256.1.1.1/x", "not a valid IPv4 address"),
        ("https://1.2.3.4.5/x", "more than four parts"),
        ("https://0189.0.0.1/x", "bad octal part"),
        ("https://hooks.123/x", "neither a name nor an IPv4 address"),
        ("https://-bad-.example.com/x", "not a valid host name"),
        ("https://" + "a" * 2100 + ".com/", "longer than 2048"),
        ("", "non-empty"),
    ],
)
def test_bad_urls_are_refused_with_what_is_allowed(url: str, message: str):
    with pytest.raises(ConfigError, match=message):
        check_callback_url(url, STRICT)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/egress?tenant=42",
        "https://hooks.example.com:8443/",
        "https://xn--bcher-kva.example/x",
        "https://8.8.8.8/x",
        "https://[2606:4700:4700::1111]/x",
        "https://hooks.example.com./x",
    ],
)
def test_public_https_urls_pass_unchanged(url: str):
    assert check_callback_url(url, STRICT) == url


def test_http_and_loopback_need_their_explicit_settings():
    with pytest.raises(ConfigError, match=re.escape("http only with webhooks.allow_http")):
        check_callback_url("http://hooks.example.com/", STRICT)
    assert check_callback_url("http://hooks.example.com/", WebhookSettings(allow_http=True))
    with pytest.raises(ConfigError, match="loopback"):
        check_callback_url("https://127.0.0.1:9000/", WebhookSettings(allow_http=True))
    assert check_callback_url("http://127.0.0.1:9000/", DEV)
    assert check_callback_url("http://localhost:9000/", DEV)
    assert check_callback_url("http://[::1]:9000/", DEV)
    # Allowing loopback allows nothing else.
    for address in ("10.0.0.1", "169.254.169.254", "0.0.0.0", "100.64.0.1"):
        with pytest.raises(ConfigError):
            check_callback_url(f"http://{address}/", DEV)
    with pytest.raises(ConfigError, match=re.escape("embedding 10.0.0.1")):
        check_callback_url("http://[::ffff:10.0.0.1]/", DEV)


def test_names_are_not_resolved_at_create_time():
    # Resolving here would prove nothing (DNS can change); delivery checks again.
    assert check_callback_url("https://does-not-exist.invalid/x", STRICT)


def _resolver(*addresses: str):
    calls: list[tuple[str, int]] = []

    def resolve(host: str, port: int) -> list[str]:
        calls.append((host, port))
        return list(addresses)

    resolve.calls = calls  # type: ignore[attr-defined]
    return resolve


@pytest.mark.parametrize(("address", "reason"), BLOCKED)
def test_a_name_resolving_to_a_blocked_address_is_refused_at_delivery(address: str, reason: str):
    resolver = _resolver(address)
    with pytest.raises(Refused, match=re.escape(reason)) as info:
        resolve_callback("https://hooks.example.com/x", STRICT, resolver)
    resolved = ipaddress.ip_address(address)
    assert f"host 'hooks.example.com' resolves to {resolved}" in str(info.value)
    assert info.value.permanent is False  # DNS may point elsewhere later
    assert resolver.calls == [("hooks.example.com", 443)]


def test_one_blocked_address_among_public_ones_refuses_the_name():
    with pytest.raises(Refused, match=re.escape("10.0.0.7")):
        resolve_callback("https://hooks.example.com/x", STRICT,
                         _resolver("93.184.215.14", "10.0.0.7"))


def test_the_checked_address_is_the_one_to_connect_to():
    target = resolve_callback("https://hooks.example.com:8443/a/b?c=1", STRICT,
                              _resolver("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"))
    assert (target.scheme, target.host, target.port, target.target, target.address) == (
        "https", "hooks.example.com", 8443, "/a/b?c=1", "93.184.215.14")
    # IPv4-mapped: connect to the embedded IPv4 address that was checked.
    mapped = resolve_callback("https://hooks.example.com/", STRICT, _resolver("::ffff:8.8.8.8"))
    assert mapped.address == "8.8.8.8"


def test_literals_are_checked_again_at_delivery_and_refused_for_good():
    with pytest.raises(Refused) as info:
        resolve_callback("https://0x7f000001/x", STRICT, _resolver())
    assert info.value.permanent is True
    with pytest.raises(Refused, match="scheme 'http'"):
        resolve_callback("http://hooks.example.com/x", STRICT, _resolver("8.8.8.8"))


def test_a_name_without_addresses_is_a_resolution_failure():
    with pytest.raises(ResolveError, match="no address"):
        resolve_callback("https://hooks.example.com/x", STRICT, _resolver())
    with pytest.raises(ResolveError, match="cannot resolve"):
        resolve_callback("https://no-such-host.invalid/x", STRICT)


def test_public_addresses_pass():
    for address in ("8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700:4700::1111",
                    "::ffff:8.8.8.8", "172.32.0.1", "100.128.0.1", "192.169.0.1"):
        assert blocked_reason(ipaddress.ip_address(address)) is None, address
