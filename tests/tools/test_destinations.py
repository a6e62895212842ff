"""Destination checks: allowlists of schemes, hosts and paths, and the addresses refused
whatever the allowlist says."""

from __future__ import annotations

import pytest

from gateway.policy.decision import ArgConstraint
from gateway.tools.destinations import check_destination

HOSTS = ArgConstraint(allowed_hosts=("*.example.com", "api.partner.io"))
ANY_PUBLIC = ArgConstraint(allowed_hosts=("*",), allowed_schemes=("https", "http"))


@pytest.mark.parametrize(
    "url",
    [
        "https://docs.example.com/page",
        "https://a.b.example.com/",
        "https://DOCS.Example.COM./x?q=1#frag",
        "https://api.partner.io",
        "https://api.partner.io:8443/v1",
    ],
)
def test_allowed_urls_pass(url: str) -> None:
    assert check_destination(url, HOSTS) is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://example.com/", "not allowed"),  # "*.example.com" means strict subdomains
        ("https://evil.com/", "not allowed"),
        ("https://example.com.evil.com/", "not allowed"),
        ("https://evilexample.com/", "not allowed"),
        ("http://docs.example.com/", "scheme 'http'"),
        ("ftp://docs.example.com/", "scheme 'ftp'"),
        ("file:///etc/passwd", "scheme 'file'"),
        ("https://docs.example.com@evil.com/", "credentials"),
        ("https://user:pw@docs.example.com/", "credentials"),
        ("https://docs.example.com\\@evil.com/", "backslashes"),
        ("https://docs.example.com /", "whitespace"),
        ("https://docs.example.com\n.evil.com/", "control"),
        ("https:///path-only", "no host"),
        ("https://docs.example.com:99999/", "not a valid URL"),
        ("https://[::1/", "not a valid URL"),
        ("https://%65vil.com/", "not a valid host name"),
    ],
)
def test_refused_urls_say_why(url: str, reason: str) -> None:
    result = check_destination(url, HOSTS)
    assert result is not None
    assert reason in result


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.1/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0x7f000001/",
        "http://0177.0.0.1/",
        "http://017700000001/",
        "http://0/",
        "http://0.0.0.0/",
        "http://10.0.0.5/",
        "http://172.16.3.4/",
        "http://192.168.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.64.0.1/",
        "http://224.0.0.1/",
        "http://240.0.0.1/",
        "http://255.255.255.255/",
        "http://[::1]/",
        "http://[::]/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:7f00:1]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[fe80::1]/",
        "http://[fc00::1]/",
        "http://[ff02::1]/",
        "http://[2002:7f00:1::]/",  # 6to4 around 127.0.0.1
        "http://[64:ff9b::a00:1]/",  # NAT64 around 10.0.0.1
        "http://localhost/",
        "http://LOCALHOST./",
        "http://api.localhost/",
        "http://127.0.0.1.:8080/",
    ],
)
def test_non_public_addresses_are_refused_even_when_any_host_is_allowed(url: str) -> None:
    result = check_destination(url, ANY_PUBLIC)
    assert result is not None, url


@pytest.mark.parametrize("url", ["http://1.2.3.4.5/", "http://256.1.1.1/", "http://a.1/"])
def test_malformed_numeric_hosts_are_refused(url: str) -> None:
    result = check_destination(url, ANY_PUBLIC)
    assert result is not None
    assert "not a valid host" in result


def test_public_addresses_pass_only_when_listed() -> None:
    assert check_destination("https://93.184.216.34/", ANY_PUBLIC) is None
    listed = ArgConstraint(allowed_hosts=("93.184.216.34",))
    assert check_destination("https://93.184.216.34/", listed) is None
    assert check_destination("https://1572395042/", listed) is None  # the same address as one integer
    assert check_destination("https://93.184.216.35/", listed) is not None


def test_bare_hosts_are_checked_when_the_constraint_lists_hosts() -> None:
    assert check_destination("docs.example.com", HOSTS) is None
    assert check_destination("docs.example.com:443", HOSTS) is None
    assert check_destination("evil.com", HOSTS) is not None
    assert check_destination("127.0.0.1", ArgConstraint(allowed_hosts=("*",))) is not None
    assert check_destination("docs.example.com/path", HOSTS) is not None
    assert check_destination("evil.com@docs.example.com", HOSTS) is not None
    assert check_destination("//evil.com", HOSTS) is not None


def test_url_paths_must_match_a_prefix_by_whole_segments() -> None:
    rule = ArgConstraint(allowed_hosts=("api.example.com",), allowed_path_prefixes=("/v1/public", "/docs/"))
    assert check_destination("https://api.example.com/v1/public", rule) is None
    assert check_destination("https://api.example.com/v1/public/items?id=3", rule) is None
    assert check_destination("https://api.example.com/docs/a", rule) is None
    assert check_destination("https://api.example.com/docs", rule) is None  # a trailing "/" changes nothing
    for refused in (
        "https://api.example.com/v1/publicity",
        "https://api.example.com/v1/admin",
        "https://api.example.com/",
        "https://api.example.com",
        "https://api.example.com/v1/public/../admin",
        "https://api.example.com/v1/public/%2e%2e/admin",
        "https://api.example.com/v1/public/..%2fadmin",
    ):
        assert check_destination(refused, rule) is not None, refused


def test_path_arguments_are_checked_against_prefixes() -> None:
    rule = ArgConstraint(allowed_path_prefixes=("/srv/data",))
    assert check_destination("/srv/data/report.csv", rule) is None
    assert check_destination("/srv/data", rule) is None
    assert check_destination("/srv/database", rule) is not None
    assert check_destination("/srv/data/../../etc/passwd", rule) is not None
    assert check_destination("srv/data/x", rule) is not None
    assert check_destination("file:///srv/data/x", rule) is not None


def test_an_empty_constraint_allows_nothing() -> None:
    assert check_destination("https://example.com/", ArgConstraint()) is not None
    assert check_destination("example.com", ArgConstraint()) is not None
