"""A labelled corpus: for each kind, texts that hold one (the value to be found exactly) and
near-misses that must not be taken for it. Every credential here is made up."""

from __future__ import annotations

# A syntactically valid JWT (header {"alg":"HS256","typ":"JWT"}); the signature is random.
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "LxoS2tFczGkPLPgizskuemMghRniWaoLcyehkd3qqGElvW/VDL5AaWTg0nLVkjRo9z+40RQzuVaE8AkA\n"
    "-----END RSA PRIVATE KEY-----"
)
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
SLACK = "xoxb-" + "2400000000-2400000000000-AbCdEfGhIjKlMnOpQrStUvWx"
OPENAI = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" + "T3BlbkFJ" + "Qa7sDf0gHj3kLz"
CLOUDFLARE = "cfut_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa9876" + "Qm3x"
CLOUDFLARE_OLD = "Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa9876543"  # 40 characters, no prefix

# kind -> (text with the value, the value) pairs
POSITIVES: dict[str, list[tuple[str, str]]] = {
    "EMAIL": [
        ("write to jane.doe@example.com today", "jane.doe@example.com"),
        ("<a href='mailto:ops+alerts@corp.example.io'>mail</a>", "ops+alerts@corp.example.io"),
        (
            "https://example.com/unsubscribe?email=bob_smith@mail.example.co.uk&x=1",
            "bob_smith@mail.example.co.uk",
        ),
        ('send_mail(to="devops@tollgate.dev", subject="hi")', "devops@tollgate.dev"),
        ("(contact: a.b-c@sub-domain.example.org).", "a.b-c@sub-domain.example.org"),
    ],
    "PHONE": [
        ("call +14155552671 now", "+14155552671"),
        ("UK office +44 20 7946 0958.", "+44 20 7946 0958"),
        ("US: +1 (415) 555-2671", "+1 (415) 555-2671"),
        ("dial (415) 555-2671 after 5", "(415) 555-2671"),
        ("dial 415-555-2671 or", "415-555-2671"),
        ("dial 415.555.2671 or", "415.555.2671"),
        ("London 020 7946 0958 ext", "020 7946 0958"),
        ("Paris 01 23 45 67 89 !", "01 23 45 67 89"),
        ("mobile 07700 900123", "07700 900123"),
        ("Berlin 030 12345678", "030 12345678"),
        ("DE +49 30 901820", "+49 30 901820"),
    ],
    "CREDIT_CARD": [
        ("card 4111 1111 1111 1111 exp 12/29", "4111 1111 1111 1111"),
        ("card 4111111111111111.", "4111111111111111"),
        ("mc 5555-5555-5555-4444", "5555-5555-5555-4444"),
        ("amex 3782 822463 10005", "3782 822463 10005"),
        ("amex 378282246310005", "378282246310005"),
        ("discover 6011 1111 1111 1117", "6011 1111 1111 1117"),
        ("mc2 2223003122003222", "2223003122003222"),
        ("item 3 4111 1111 1111 1111", "4111 1111 1111 1111"),
        ("jcb 3530111333300000", "3530111333300000"),
        ('{"pan":"4012888888881881"}', "4012888888881881"),
    ],
    "IBAN": [
        ("IBAN DE89 3704 0044 0532 0130 00 please", "DE89 3704 0044 0532 0130 00"),
        ("iban: DE89370400440532013000", "DE89370400440532013000"),
        ("to GB82 WEST 1234 5698 7654 32.", "GB82 WEST 1234 5698 7654 32"),
        ("FR1420041010050500013M02606", "FR1420041010050500013M02606"),
        ("pay NL91ABNA0417164300 by", "NL91ABNA0417164300"),
    ],
    "US_SSN": [
        ("SSN 123-45-6789 on file", "123-45-6789"),
        ("ssn=078-05-1120;", "078-05-1120"),
    ],
    "IP_ADDRESS": [
        ("from 192.168.1.20 at", "192.168.1.20"),
        ("server 10.0.0.1.", "10.0.0.1"),
        ("v6 2001:db8::ff00:42:8329 up", "2001:db8::ff00:42:8329"),
        ("v6 2001:0db8:85a3:0000:0000:8a2e:0370:7334", "2001:0db8:85a3:0000:0000:8a2e:0370:7334"),
        ("mapped ::ffff:192.0.2.128 here", "::ffff:192.0.2.128"),
        ("link fe80::1ff:fe23:4567:890a%eth0", "fe80::1ff:fe23:4567:890a"),
        ("http://203.0.113.9:8080/path", "203.0.113.9"),
    ],
    "AWS_ACCESS_KEY": [
        ("aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
        ('"ASIAY34FZKBOKMUTVV7A"', "ASIAY34FZKBOKMUTVV7A"),
    ],
    "GITHUB_TOKEN": [
        (f"token: {GITHUB}", GITHUB),
        (
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        ),
    ],
    "SLACK_TOKEN": [
        (f"SLACK_BOT_TOKEN={SLACK}", SLACK),
        (
            "hook https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX ok",
            "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        ),
    ],
    "OPENAI_API_KEY": [
        (f"OPENAI_API_KEY={OPENAI}", OPENAI),
        ("key sk-" + "a" * 20 + "T3BlbkFJ" + "b" * 20 + " end", "sk-" + "a" * 20 + "T3BlbkFJ" + "b" * 20),
    ],
    "CLOUDFLARE_API_TOKEN": [
        (f"token {CLOUDFLARE} here", CLOUDFLARE),
        (f"CLOUDFLARE_API_TOKEN={CLOUDFLARE_OLD}", CLOUDFLARE_OLD),
        (f'cf_token: "{CLOUDFLARE_OLD}"', CLOUDFLARE_OLD),
    ],
    "JWT": [(f"id_token={JWT}&state=1", JWT)],
    "PRIVATE_KEY": [(f"key:\n{PEM}\nthanks", PEM)],
    "BEARER_TOKEN": [
        ("Authorization: Bearer abcdefghijklmnop1234567890", "abcdefghijklmnop1234567890"),
        ("curl -H 'authorization: bearer Zm9vYmFyYmF6cXV4cXV1eA==' x", "Zm9vYmFyYmF6cXV4cXV1eA=="),
    ],
}

# kind -> texts in which that kind must not be found
NEAR_MISSES: dict[str, list[str]] = {
    "EMAIL": [
        "use the @decorator here",
        "user@localhost is not routable",
        "see https://medium.com/@author/post-title",
        "npm install @scope/pkg@1.2.3",
        "git tag v1.2@build",
    ],
    "PHONE": [
        "order #123456789012 shipped",
        "timestamp 1715950000 and 1715950000123",
        "released 2024-05-17 at 12:30:45",
        "version 1.2.3.4 and 0.12.3",
        "dated 01.02.2024",
        "call 555-123-4567 (exchange starting with 1)",
        "+12 345",
        "ratio 0.5 0.25 0.125",
    ],
    "CREDIT_CARD": [
        "card 4111 1111 1111 1112 (bad checksum)",
        "order 1234567890123456",
        "tracking 9400 1000 0000 0000 0000 00",
        "epoch ms 1715950000123",
        "ISBN 978-3-16-148410-0",
        "4111 1111-1111 1111",
    ],
    "IBAN": [
        "DE89 3704 0044 0532 0130 01 (bad checksum)",
        "XX89370400440532013000",
        "GB82 WEST 1234 5698 7654",
        "product code AB12 CDEF GHIJ",
    ],
    "US_SSN": [
        "000-12-3456",
        "666-12-3456",
        "900-12-3456",
        "123-00-4567",
        "123-45-0000",
        "date 2024-05-17",
        "phone 555-123-4567",
    ],
    "IP_ADDRESS": [
        "version 999.1.1.1",
        "10.0.0.256 is out of range",
        "release 1.2.3",
        "time 12:30:45",
        "mac 00:1A:2B:3C:4D:5E",
        "C++ std::vector and a::b",
        "loopback ::1",
        "1.2.3.4.5",
    ],
    "AWS_ACCESS_KEY": ["AKIA1234", "XAKIAIOSFODNN7EXAMPLE", "akiaiosfodnn7example"],
    "GITHUB_TOKEN": ["ghp_short", "the ghp_ prefix alone"],
    "SLACK_TOKEN": ["xoxb-123", "https://hooks.slack.com/services/"],
    "OPENAI_API_KEY": ["sk-learn", "task-force-alpha-bravo-charlie-delta", "use sk- keys"],
    "CLOUDFLARE_API_TOKEN": ["cfut_short", "cloudflare is a company", "CF_ZONE_ID=abc"],
    "JWT": ["eyJhbGciOiJIUzI1NiJ9", "eyJub3Rqc29u.eyJub3Rqc29u.abc"],
    "PRIVATE_KEY": [
        "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END PUBLIC KEY-----"
    ],
    "BEARER_TOKEN": ["the bearer of bad news", "Bearer short"],
}
