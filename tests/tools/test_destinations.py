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
        ("https://docs.example.com:99999/", "invalid port"),
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


# A corpus of destinations an attacker might have a model emit, by class: each must be
# refused under a rule that allows https to *.example.com (and the benign twin passes).
MALICIOUS = {
    "port": [
        "https://docs.example.com:0/",
        "https://docs.example.com:00/",
        "https://docs.example.com:65536/",
        "https://docs.example.com:4294967377/",
        "https://docs.example.com:http/",
        "https://docs.example.com:/",
        "https://docs.example.com:+443/",
        "https://docs.example.com:-1/",
        "https://docs.example.com:\u0664\u0664\u0663/",  # Arabic-Indic digits
        "https://docs.example.com:443:443/",
        "https://[2606:4700::1]:0/",
    ],
    "userinfo": [
        "https://docs.example.com@evil.com/",
        "https://docs.example.com:443@evil.com/",
        "https://@evil.com/",
        "https://docs.example.com%40evil.com/",
        "https://evil.com#@docs.example.com/",
        "https://evil.com?@docs.example.com/",
    ],
    "backslash": [
        "https://evil.com\\@docs.example.com/",
        "https:\\\\evil.com/",
        "https://docs.example.com\\..\\evil",
    ],
    "idn": [
        "https://faß.example.com/",  # IDNA 2003 says fass, IDNA 2008 says xn--fa-hia
        "https://\uff44\uff4f\uff43\uff53.example.com/",  # fullwidth letters
        "https://docs.example.com\u3002evil.com/",  # ideographic full stop
        "https://docs.ex\u0430mple.com/",  # Cyrillic a: another domain
        "https://xn--docs-9ta.example.org/",
        "https://docs\u200d.example.com/",  # zero-width joiner
    ],
    "trailing dots": ["https://example.com./", "https://docs.example.com../", "https://.example.com/"],
    "ipv4 forms": [
        "https://2130706433/",
        "https://0x7f000001/",
        "https://0x7f.0.0.1/",
        "https://0177.0.0.1/",
        "https://127.0.1/",
        "https://0300.0250.0.1/",  # 192.168.0.1 in octal
        "https://0xa9fea9fe/",  # 169.254.169.254
        "https://1.2.3.4/",  # public but not listed
    ],
    "ipv6": [
        "https://[::1]/",
        "https://[0:0:0:0:0:0:0:1]/",
        "https://[::ffff:a9fe:a9fe]/",
        "https://[::127.0.0.1]/",
        "https://[fe80::1%25eth0]/",
        "https://[2606:4700::1%25eth0]/",
        "https://[2606:4700::1]/",  # public but not listed
    ],
    "scheme": ["HTTP://docs.example.com/", "Ftp://docs.example.com/", "javascript://docs.example.com/"],
    "whitespace and control": [
        " https://docs.example.com/",
        "https://docs.example.com/\t",
        "https://docs.example.com\u00a0/",
        "https://docs.example.com/\u2028",
        "https://docs.example.com/\u202e",  # right-to-left override
    ],
}
BENIGN = [
    "https://docs.example.com:443/",
    "https://docs.example.com:8443/x",
    "HTTPS://Docs.Example.COM/",
    "https://docs.example.com./",
    "https://xn--mnchen-3ya.example.com/",
    "https://münchen.example.com/",
    "https://MÜNCHEN.example.com/",
    "https://docs.example.com/wiki/Straße",
    "https://docs.example.com/a%20b?q=%2e%2e#..",
]
RULE = ArgConstraint(allowed_hosts=("*.example.com",))


@pytest.mark.parametrize(
    "url",
    [url for urls in MALICIOUS.values() for url in urls],
)
def test_the_malicious_corpus_is_refused(url: str) -> None:
    assert check_destination(url, RULE) is not None, url


@pytest.mark.parametrize("url", BENIGN)
def test_the_benign_corpus_passes(url: str) -> None:
    assert check_destination(url, RULE) is None, url


def test_an_invalid_port_is_refused_in_bare_hosts_too() -> None:
    assert check_destination("docs.example.com:443", HOSTS) is None
    for host in ("docs.example.com:0", "docs.example.com:", "docs.example.com:99999", "[2606:4700::1]:0"):
        result = check_destination(host, ArgConstraint(allowed_hosts=("*",)))
        assert result is not None
        assert "invalid port" in result, host


def test_unicode_host_patterns_match_their_punycode() -> None:
    rule = ArgConstraint(allowed_hosts=("münchen.de", "*.bücher.example"))
    assert check_destination("https://xn--mnchen-3ya.de/", rule) is None
    assert check_destination("https://münchen.de/", rule) is None
    assert check_destination("https://shop.xn--bcher-kva.example/", rule) is None
    assert check_destination("https://muenchen.de/", rule) is not None


PREFIXED = ArgConstraint(allowed_hosts=("api.example.com",), allowed_path_prefixes=("/v1/public",))


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com/v1/public/%252e%252e/admin",  # decoded twice
        "https://api.example.com/v1/public/%25252e%25252e/admin",  # three times
        "https://api.example.com/v1/public/%252e%252e%252fadmin",
        "https://api.example.com/v1/public/%2e%2e%2f%2e%2e%2fadmin",
        "https://api.example.com/v1/public/..;/admin",  # path parameters (servlet containers)
        "https://api.example.com/v1/public/%2e%2e;x/admin",
        "https://api.example.com/v1/public/%c0%ae%c0%ae/admin",  # overlong UTF-8 dots
        "https://api.example.com/v1/public/\u2025/admin",  # two-dot leader: NFKC ".."
        "https://api.example.com/v1/public/%E2%80%A5/admin",
        "https://api.example.com/v1/public/..\uff0fadmin",  # fullwidth solidus
        "https://api.example.com/v1/public/%5c..%5cadmin",  # encoded backslashes
        "https://api.example.com/v1/public/%00/x",
        "https://api.example.com/v1%252fpublic/x",  # one segment to a server that decodes once
        "https://api.example.com/v1/public/%2525252525252e",  # never stops decoding
        "https://api.example.com/v1/./admin",
        "https://api.example.com/v1/public/./../admin",
    ],
)
def test_encoded_traversal_is_refused_however_often_it_is_encoded(url: str) -> None:
    assert check_destination(url, PREFIXED) is not None, url


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com/v1/public/./items",
        "https://api.example.com/v1/./public/items",
        "https://api.example.com/./v1/public",
        "https://api.example.com/v1/public/.",
        "https://api.example.com/v1/public/%2e/items",
        "https://api.example.com/v1/public/AC%2FDC",
        "https://api.example.com/v1/public/100%25",
        "https://api.example.com/v1/public/...",
        "https://api.example.com/v1/public/..hidden",
        "https://api.example.com/v1/public/Stra%C3%9Fe",
    ],
)
def test_harmless_dot_segments_and_encodings_pass(url: str) -> None:
    assert check_destination(url, PREFIXED) is None, url


def test_file_paths_are_normalised_and_checked_the_same_way() -> None:
    rule = ArgConstraint(allowed_path_prefixes=("/srv/data",))
    assert check_destination("/srv/data/./report.csv", rule) is None
    assert check_destination("/srv/./data/report.csv", rule) is None
    assert check_destination("/srv/data/%252e%252e/secrets", rule) is not None
    assert check_destination("/srv/data/..;/secrets", rule) is not None
    assert check_destination("/srv/./secrets", rule) is not None


@pytest.mark.parametrize(
    "value",
    [
        "https://docs.example.com:0/reset?token=s3cr3t",
        "https://docs.example.com:99999/?token=s3cr3t",
        "https://[::1/?token=s3cr3t",
        "https://evil.com/?token=s3cr3t",
        "https://docs.example.com@evil.com/?token=s3cr3t",
        "docs.example.com/?token=s3cr3t",
        "docs.example.com:0?token=s3cr3t",
        "2606:4700::1?token=s3cr3t",
    ],
)
def test_reasons_never_quote_a_query(value: str) -> None:
    """Reasons go to the logs and to the client's transcript: they name the host, never the query."""
    result = check_destination(value, HOSTS)
    assert result is not None
    assert "s3cr3t" not in result


def test_an_ipv6_host_must_be_bracketed() -> None:
    any_public = ArgConstraint(allowed_hosts=("*",))
    assert check_destination("[2606:4700::1]:443", any_public) is None
    result = check_destination("2606:4700::1", any_public)
    assert result is not None
    assert "without brackets" in result


@pytest.mark.parametrize(
    "url",
    [
        "https://" + "1" * 5000 + "/",
        "https://docs.example.com:" + "4" * 5000 + "/",
        "https://0x" + "f" * 5000,
    ],
)
def test_huge_numbers_in_hosts_and_ports_are_refused_not_parsed(url: str) -> None:
    result = check_destination(url, ArgConstraint(allowed_hosts=("*",)))
    assert result is not None


def test_private_addresses_pass_only_where_the_rule_allows_them_and_names_them() -> None:
    named = ArgConstraint(
        allowed_hosts=("127.0.0.1", "hooks.localhost", "[fd00::1]", "*"),
        allowed_schemes=("http",),
        allow_private=True,
    )
    for url in ("http://127.0.0.1:8080/hook", "http://hooks.localhost/x", "http://[fd00::1]/x"):
        assert check_destination(url, named) is None
        assert check_destination(url, ArgConstraint(named.allowed_hosts, ("http",))) is not None
    # "*" stays "any public host": a private address the rule does not name is refused.
    for url in ("http://10.0.0.2/x", "http://127.0.0.2/x", "http://localhost/x", "http://169.254.169.254/"):
        assert check_destination(url, named) is not None
    assert check_destination("http://public.example.org/x", named) is None
