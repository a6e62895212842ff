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
SLACK_APP = (
    "xapp-1-A0"
    + "4ABCD1EFG-5123456789012-"
    + "9f3c2a7b1e8d4c6f0a5b3e9d7c1f2a4b6e8d0c2f4a6b8e0d1c3f5a7b9e2d4f6a"
)
SLACK_USER = "xoxp-" + "5123456789-5234567890123-5345678901234-" + "8e3f1a9c7b5d2e4f6a8c0b1d3e5f7a9c"
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
        ("x a@bb.cc.uni-example.de", "a@bb.cc.uni-example.de"),
        ("Prof. Weber <k.weber@informatik.tu-muenchen.de> wrote:", "k.weber@informatik.tu-muenchen.de"),
        ('{"email": "max.mustermann@mail.stadt-koeln.nrw.de"}', "max.mustermann@mail.stadt-koeln.nrw.de"),
        (
            "Reply-To: noreply-42@eu-west-1.notify.my-shop.co.uk\n",
            "noreply-42@eu-west-1.notify.my-shop.co.uk",
        ),
        ("email JOHN.SMITH@EXAMPLE-CORP.COM, thanks", "JOHN.SMITH@EXAMPLE-CORP.COM"),
        ("https://x.example/login?next=/&user=ana%2Bx@dept.uni-wien.ac.at", "ana%2Bx@dept.uni-wien.ac.at"),
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
        ("call 1-415-555-0132 today", "1-415-555-0132"),
        ("toll free 1 (800) 555-0199.", "1 (800) 555-0199"),
        ("Tel. 030/1234567", "030/1234567"),
        ("Büro: 0221/123 4567, Fax folgt", "0221/123 4567"),
        ("Handy 0151 23456789", "0151 23456789"),
        ("mobile: 09876 54321.", "09876 54321"),
        ("ring 020 7946 0958 or", "020 7946 0958"),
        ("text 07700 900123!", "07700 900123"),
        ("appelez le 06 12 34 56 78.", "06 12 34 56 78"),
        ("portable 06.12.34.56.78", "06.12.34.56.78"),
        ("+33 6 12 34 56 78 (FR)", "+33 6 12 34 56 78"),
        ("+49 (0)30 1234567 ", "+49 (0)30 1234567"),
        ("(+44) 20 7946 0958", "(+44) 20 7946 0958"),
        ("+1.415.555.2671", "+1.415.555.2671"),
        ('{"phone": "+91 98765 43210"}', "+91 98765 43210"),
        ("whatsapp +91-98765-43210", "+91-98765-43210"),
        ("tel:+442079460958", "+442079460958"),
        ("Fax (030) 1234567", "(030) 1234567"),
        ("Zentrale: 030 / 1234567", "030 / 1234567"),
        ("+33 (0)6 12 34 56 78", "+33 (0)6 12 34 56 78"),
        ("0033 6 12 34 56 78", "0033 6 12 34 56 78"),
        ("+1 415-555-0132 x123", "+1 415-555-0132"),
        ("07700 900 123", "07700 900 123"),
        ("Sydney (02) 9876 5432.", "(02) 9876 5432"),
        ("call me on 0044 20 7946 0958", "0044 20 7946 0958"),
        ("(415)555-0132", "(415)555-0132"),
        ("+81 3-1234-5678", "+81 3-1234-5678"),
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
        ("iban de89370400440532013000.", "de89370400440532013000"),
        ("iban: gb82 west 1234 5698 7654 32", "gb82 west 1234 5698 7654 32"),
        ('{"iban":"ES9121000418450200051332"}', "ES9121000418450200051332"),
        ("IT60 X054 2811 1010 0000 0123 456", "IT60 X054 2811 1010 0000 0123 456"),
    ],
    "US_SSN": [
        ("SSN 123-45-6789 on file", "123-45-6789"),
        ("ssn=078-05-1120;", "078-05-1120"),
        ("SSN 123 45 6789 on file", "123 45 6789"),
        ("ssn=123456789", "123456789"),
        ('{"ssn": "123456789"}', "123456789"),
        ("SSN: 123456789\n", "123456789"),
        ("Social Security Number: 219099999.", "219099999"),
        ("social_security_number=078051120&x", "078051120"),
        ("SSN#: 123456789", "123456789"),
        ("Social Security No. 123456789", "123456789"),
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
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        (
            'AWS_SECRET_ACCESS_KEY="Zq8Tb3W1yKpL0sNvX7eHcMdQ2rS4tU6vW8xY0zA1"',
            "Zq8Tb3W1yKpL0sNvX7eHcMdQ2rS4tU6vW8xY0zA1",
        ),
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
            "hook https://hooks.slack.com/services/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 ok",
            "https://hooks.slack.com/services/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",
        ),
        (f"SLACK_APP_TOKEN={SLACK_APP}", SLACK_APP),
        (f"xoxp token: {SLACK_USER}.", SLACK_USER),
        (
            "rotated: xoxe.xoxp-1-Mi0yLTE3MzQ1Njc4OTAxMi0xNzM0NTY3ODkwMTIz",
            "xoxe.xoxp-1-Mi0yLTE3MzQ1Njc4OTAxMi0xNzM0NTY3ODkwMTIz",
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
    "JWT": [
        (f"id_token={JWT}&state=1", JWT),
        (f"token {JWT}.", JWT),
        (f"Here is the JWT: {JWT}. Use it once.", JWT),
        (f"({JWT})", JWT),
        (f'{{"jwt": "{JWT}"}}', JWT),
        (f"Authorization: Bearer {JWT}", JWT),
    ],
    "PRIVATE_KEY": [(f"key:\n{PEM}\nthanks", PEM)],
    "BEARER_TOKEN": [
        ("Authorization: Bearer abcdefghijklmnop1234567890", "abcdefghijklmnop1234567890"),
        ("curl -H 'authorization: bearer Zm9vYmFyYmF6cXV4cXV1eA==' x", "Zm9vYmFyYmF6cXV4cXV1eA=="),
        (
            '{"access_token":"ya29.a0AfB_byC7kLmN2pQ-rS4tU6vW8xY0zA1bC3dE5fG7hI9jK","token_type":"Bearer"}',
            "ya29.a0AfB_byC7kLmN2pQ-rS4tU6vW8xY0zA1bC3dE5fG7hI9jK",
        ),
        (
            '{"refresh_token": "1//0gLq3Zr8TbW1yKpL0sNvX7eHcMdQ2", "expires_in": 3599}',
            "1//0gLq3Zr8TbW1yKpL0sNvX7eHcMdQ2",
        ),
        (
            "callback#access_token=EAAGm0PX4ZCpsBAKq7ZB2vZC9hZA&token_type=bearer",
            "EAAGm0PX4ZCpsBAKq7ZB2vZC9hZA",
        ),
        (
            "refresh_token=def50200a1b2c3d4e5f60718293a4b5c6d7e8f&grant_type=refresh_token",
            "def50200a1b2c3d4e5f60718293a4b5c6d7e8f",
        ),
        ("accessToken: 'tk_Qm9vYmFy.YmF6cXV4-cXV1eA'", "tk_Qm9vYmFy.YmF6cXV4-cXV1eA"),
        ('"auth_token": "9f8e7d6c5b4a39281706f5e4d3c2b1a0"', "9f8e7d6c5b4a39281706f5e4d3c2b1a0"),
        ('{"id_token": "AbCdEfGhIjKlMnOpQrSt.uvwxyz0123456789"}', "AbCdEfGhIjKlMnOpQrSt.uvwxyz0123456789"),
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

# Placeholders that templates and docs put where a credential goes: none is a secret.
PLACEHOLDERS: list[str] = [
    "SLACK_BOT_TOKEN=xoxb-your-bot-token-here",
    "export SLACK_APP_TOKEN=xapp-your-app-level-token",
    "OPENAI_API_KEY=YOUR_API_KEY_HERE",
    "Authorization: Bearer YOUR_API_KEY_HERE",
    "Authorization: Bearer YOUR_ACCESS_TOKEN",
    "Authorization: Bearer <your-key>",
    "curl -H 'Authorization: Bearer $OPENAI_API_KEY'",
    "set OPENAI_API_KEY=sk-... before running",
    "api_key = 'sk-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx'",
    "OPENAI_API_KEY=sk-your-openai-api-key-here",
    "OPENAI_API_KEY=sk-proj-REPLACE_ME_WITH_YOUR_KEY",
    "GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "aws_access_key_id = AKIAXXXXXXXXXXXXXXXX",
    "SLACK_WEBHOOK=https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    '{"access_token": "YOUR_ACCESS_TOKEN_HERE", "token_type": "Bearer"}',
    "refresh_token=<refresh-token>&grant_type=refresh_token",
    "Bearer xxxxxxxxxxxxxxxxxxxxxxxx",
    "token: xoxp-xxxxxxxxxx-xxxxxxxxxx",
    "SLACK_TOKEN=xoxb-xxxx-xxxx-xxxx",
    "api_key: 'your-api-key', token: \"xoxb-REPLACE-ME\"",
    "Authorization: Bearer your-token-here",
    "Authorization: Bearer REDACTED_REDACTED_REDACTED",
    '"access_token": "ACCESS_TOKEN_GOES_HERE"',
    "sk-ant-api03-xxxxxxxxxxxxxxxxxxxxxxxx",
    "CLOUDFLARE_API_TOKEN=your_cloudflare_api_token_goes_here_12345",
]

# Ordinary text, code and data: nothing here is any kind of entity.
NEGATIVES: list[str] = [
    "Order #123456789012 shipped on 2024-05-17 at 12:30:45 UTC.",
    "Your order number is 4000-1234-5678 and the invoice INV-2024-000123.",
    "Tracking: 1Z999AA10123456784, ETA 3-5 business days.",
    "The price went from $1,299.99 to $1,099.00 (save 15%).",
    "Total: EUR 1.234,56 incl. 19% VAT; net 1.037,45.",
    "Released v2.14.3 (build 20240517.3) and 10.0.19045.3803.",
    "Requires python>=3.11,<3.13 and numpy 1.26.4.",
    "commit 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b merged into main",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "request id 123e4567-e89b-12d3-a456-426614174000 failed",
    "trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7",
    'object id 5f8d0d55b54764421b7156c9, etag W/"0815-4711"',
    "epoch 1715950000, millis 1715950000123, nanos 1715950000123456789",
    "ISO 8601: 2024-05-17T12:30:45.123+02:00 and 2024-05-17T10:30:45Z",
    "Meeting 17.05.2024 14:00-15:30 in room 3.14, floor 2.",
    "Dates: 05/17/2024, 17/05/2024, 2024/05/17, 01/02/2024.",
    "ISBN 978-3-16-148410-0 and ISBN-10 0-306-40615-2",
    "Coordinates 48.137154, 11.576124 (Munich).",
    "Population 1,234,567,890 in 2023; GDP 25,462,700,000,000.",
    "Matrix [[1, 2, 3], [4, 5, 6]] has shape (2, 3).",
    "Port 8080, timeout 30000 ms, retries 3, backoff 1.5x.",
    "The CVE-2024-3094 fix landed in xz 5.6.2.",
    "RFC 9110 section 15.5.20; see also RFC 7231.",
    "Flight LH 2021 departs 06:45, seat 23A, gate B12.",
    "Part no. 0800-555-0199-A, batch 2024.05.17.",
    "The ratio is 0.5 0.25 0.125 and pi is 3.14159265358979.",
    "A 1080p video at 29.97 fps is 1920x1080 pixels.",
    "Deployed to eu-west-1 with ami-0abcdef1234567890.",
    "Use the @decorator and npm install @scope/pkg@1.2.3.",
    "email me at jane at example dot com (no link).",
    "The Bearer of this letter is our agent.",
    "see https://medium.com/@author/post-title for details",
    "git checkout -b feature/JIRA-1234-add-login",
    "C++ std::vector<int> v{1, 2, 3}; a::b::c();",
    "grep -n 'TODO' src/*.py | wc -l  # 42",
    "Room 101, 221B Baker Street, London NW1 6XE",
    "Account 12345678, sort code 12-34-56 (UK).",
    "Temperatures: -5.5, 0, 12.25 and 37.0 degrees.",
    "product code AB12 CDEF GHIJ and SKU DE-1234-5678",
    "hex dump: de ad be ef 00 11 22 33 44 55 66 77",
    "base64 of hello is aGVsbG8= and of world d29ybGQ=",
    "Score 98765 43210 points in 2 rounds",
    "Lot 123 45 6789a is sold",
    "The access_token field holds the token; refresh_token is optional.",
    "ssn field left empty: ssn=",
    "secretKey = 0123456789abcdef0123456789abcdef01234567 (a test vector)",
    "item 0012 345 678 and part 00123456789, invoice 0042 1234 5678",
    "The auth_token is rotated daily; see the access-token docs.",
]
