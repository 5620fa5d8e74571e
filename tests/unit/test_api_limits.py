"""The token bucket of the rate limiter and the signed links, with a manual clock."""

from __future__ import annotations

import pytest

from egress.api.links import Link, load_link_key, sign_link, verify_link
from egress.config import ApiSettings, Settings
from egress.exceptions import ConfigError
from egress.ratelimit import RateLimiter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_allows_the_burst_then_the_rate():
    clock = Clock()
    limiter = RateLimiter(rate=2.0, burst=3, clock=clock)
    assert [limiter.acquire("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.acquire("a") == pytest.approx(0.5)  # one token comes back in 0.5 s
    assert limiter.acquire("b") == 0.0  # every key has its own bucket
    clock.now += 0.5
    assert limiter.acquire("a") == 0.0
    assert limiter.acquire("a") > 0
    clock.now += 60  # refills up to the burst, not beyond
    assert [limiter.acquire("a") == 0.0 for _ in range(4)] == [True, True, True, False]
    with pytest.raises(ValueError):
        RateLimiter(rate=0, burst=1)


def test_links_verify_only_with_the_key_and_unchanged():
    key = b"k" * 32
    link = Link(project="acme", export_id="exp_1", file="a/b.csv", expires_at=123,
                token_id="tok_1")
    text = sign_link(key, link)
    assert verify_link(key, text) == link
    assert verify_link(b"x" * 32, text) is None
    payload, signature = text.split(".")
    assert verify_link(key, f"{payload}x.{signature}") is None
    assert verify_link(key, f"{payload}.{signature[:-1]}") is None
    for junk in ("", ".", "a.b.c", "x" * 5000):
        assert verify_link(key, junk) is None


def test_link_key_from_settings_or_generated_once(tmp_path):
    given = Settings(home=tmp_path, store_url="sqlite:///x",
                     api=ApiSettings(link_signing_key="s" * 40))
    assert load_link_key(given) == b"s" * 40
    assert "s" * 40 not in repr(given)  # never printed with the settings
    with pytest.raises(ConfigError, match="at least 32"):
        load_link_key(Settings(home=tmp_path, store_url="sqlite:///x",
                               api=ApiSettings(link_signing_key="short")))
    made = Settings(home=tmp_path / "home", store_url="sqlite:///x")
    first = load_link_key(made)
    assert len(first) == 64 and load_link_key(made) == first
    path = tmp_path / "home" / "api-link-key"
    assert path.stat().st_mode & 0o777 == 0o600
