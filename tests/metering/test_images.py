"""Image parts are estimated by their model's image rule, not as the bytes of their base64
text: the header's width and height in patches, capped; an image URL at the cap."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.metering.images import ImageRule, image_size, image_urls
from simulator import RunningSimulator
from tests.harness import openai_error, openai_upstream
from tests.servers import TEST_KEY, RunningGateway, gateway_config, running_gateway

RULE = ImageRule(patch_px=28, max_per_image=16_384)


def png(width: int, height: int, padding: int = 0) -> bytes:
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    ihdr = struct.pack(">I", 13) + b"IHDR" + header + struct.pack(">I", zlib.crc32(b"IHDR" + header))
    return b"\x89PNG\r\n\x1a\n" + ihdr + b"\x00" * padding


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00" * 8


def jpeg(width: int, height: int, exif_bytes: int = 0) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    app1 = b"\xff\xe1" + struct.pack(">H", exif_bytes + 2) + b"\x00" * exif_bytes if exif_bytes else b""
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, height, width, 3) + b"\x00" * 9
    return b"\xff\xd8" + app0 + app1 + sof + b"\xff\xda"


def webp_vp8x(width: int, height: int) -> bytes:
    chunk = b"\x00\x00\x00\x00" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", 4 + 8 + len(chunk)) + b"WEBP" + b"VP8X" + struct.pack("<I", 10) + chunk


def webp_lossless(width: int, height: int) -> bytes:
    bits = (width - 1) | ((height - 1) << 14)
    data = b"\x2f" + bits.to_bytes(4, "little") + b"\x00" * 8
    return (
        b"RIFF"
        + struct.pack("<I", 4 + 8 + len(data))
        + b"WEBP"
        + b"VP8L"
        + struct.pack("<I", len(data))
        + data
    )


def data_url(image: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(image).decode()


@pytest.mark.parametrize(
    ("image", "size"),
    [
        (png(1024, 768), (1024, 768)),
        (gif(320, 200), (320, 200)),
        (jpeg(1920, 1080), (1920, 1080)),
        (jpeg(640, 480, exif_bytes=30_000), (640, 480)),  # a frame header after a large EXIF block
        (webp_vp8x(800, 600), (800, 600)),
        (webp_lossless(300, 150), (300, 150)),
    ],
)
def test_the_size_is_read_from_the_header(image: bytes, size: tuple[int, int]) -> None:
    assert image_size(data_url(image)) == size


@pytest.mark.parametrize(
    "url",
    [
        "data:image/png;base64,not base64 at all!",
        "data:image/png," + "x" * 100,  # not base64
        data_url(b"\x00" * 64),  # no known header
        data_url(png(0, 10)),  # an empty image
    ],
)
def test_an_unreadable_image_has_no_size(url: str) -> None:
    assert image_size(url) is None


def test_tokens_are_patches_capped_and_a_url_or_unreadable_image_costs_the_cap() -> None:
    assert RULE.tokens(data_url(png(1024, 1024))) == 37 * 37
    assert RULE.tokens(data_url(png(28, 29))) == 2
    assert RULE.tokens(data_url(png(20_000, 20_000))) == RULE.max_per_image
    assert RULE.tokens("https://images.example.com/cat.png") == RULE.max_per_image
    assert RULE.tokens(data_url(b"\x00" * 64)) == RULE.max_per_image


def test_image_urls_are_found_in_content_parts_only() -> None:
    messages: list[Any] = [
        {"role": "system", "content": "data:image/png;base64,AAAA"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "u1"}}],
        },
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": "u2"}, "junk", {"type": "image_url"}],
        },
        "not a message",
    ]
    assert list(image_urls(messages)) == ["u1", "u2"]


# Through the gateway: a tokens-per-minute limit sees the image rule's estimate.

TPM = 20_000


def vision_body(*urls: str) -> dict[str, Any]:
    parts = [{"type": "text", "text": "What is in these images?"}]
    parts += [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return {"model": "chat", "messages": [{"role": "user", "content": parts}], "max_tokens": 100}


@pytest.fixture(params=["default", "by_model"])
def limited(
    request: pytest.FixtureRequest, tmp_path: Path, upstream_sim: RunningSimulator
) -> Iterator[tuple[RunningGateway, str]]:
    metering: dict[str, Any] = {}
    if request.param == "by_model":
        metering["image_tokens_by_model"] = {"sim-model": {"patch_px": 14, "max_per_image": 1_000}}
    config = gateway_config(
        upstreams={"local": openai_upstream(upstream_sim.openai_base_url(0))},
        models={"chat": [{"upstream": "local", "model": "sim-model"}]},
        tenants={"alpha": {"rate_limits": {"tokens_per_minute": TPM}}, "beta": {}},
        state={"store": "sqlite", "sqlite_path": str(tmp_path / "state.db")},
        metering=metering,
    )
    with running_gateway(config) as running:
        yield running, request.param


def post(gateway: RunningGateway, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {TEST_KEY}"},
        timeout=30,
    )


def test_a_large_inline_image_is_admitted_by_its_patches_not_its_bytes(
    limited: tuple[RunningGateway, str],
) -> None:
    gateway, _ = limited
    image = data_url(png(1024, 1024, padding=450_000))  # about 600 KB of base64: 200k tokens as text
    response = post(gateway, vision_body(image))
    assert response.status_code == 200, response.text


def test_image_urls_are_reserved_at_their_models_cap(limited: tuple[RunningGateway, str]) -> None:
    gateway, rule = limited
    two_urls = vision_body("https://images.example.com/a.png", "https://images.example.com/b.png")
    response = post(gateway, two_urls)
    if rule == "default":  # 2 x 16,384 tokens cannot fit a 20,000 tokens-per-minute limit
        error = openai_error(response, 429)
        assert error["message"].startswith("Request too large for tokens per minute")
    else:  # this model's images cost at most 1,000 tokens each
        assert response.status_code == 200, response.text
