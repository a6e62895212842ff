"""Image URLs are outbound destinations: the upstream fetches them, so they may point only
where the decision's `destinations.image_url` allows, like a tool argument.

Every `image_url` content part (`{"image_url": {"url": ...}}`, or the URL as a plain
string) and every `input_image` part's `image_url`, in any message, is checked: a
`data:` URL always passes (nothing is fetched); any other URL must pass the same checks
as a tool argument (`gateway.tools.destinations`): scheme, no credentials, port, public
host on the allowlist, path prefixes. A URL that is not a string is a 400
(`invalid_value`); one the policy does not allow, or that is not a URL at all, is a 403
(`image_url_not_allowed`) naming the part and the reason, before any upstream is called.
"""

from __future__ import annotations

from gateway.errors import InvalidRequest, PermissionDenied
from gateway.exchange import Endpoint, Exchange
from gateway.image_parts import image_parts
from gateway.policy.decision import ArgConstraint
from gateway.tools.destinations import check_url, has_unsafe_chars


class ImageDestinations:
    name = "image_destinations"

    async def __call__(self, exchange: Exchange) -> None:
        decision = exchange.decision
        if decision is None or exchange.endpoint is not Endpoint.CHAT:
            return
        rule = decision.destinations.image_url
        for param, url in image_parts(exchange.body.get("messages")):
            if not isinstance(url, str):
                raise InvalidRequest(f"'{param}' must be a string.", param=param, code="invalid_value")
            reason = check_image_url(url, rule)
            if reason is not None:
                raise PermissionDenied(
                    f"Image URL not allowed by policy: {param}: {reason}.",
                    param=param,
                    code="image_url_not_allowed",
                )


def check_image_url(url: str, rule: ArgConstraint) -> str | None:
    """None when the upstream may fetch (or decode) `url` under `rule`, else why not."""
    if url[:5].lower() == "data:":
        return None
    if has_unsafe_chars(url):
        return "the URL contains whitespace, control characters or backslashes"
    if "://" not in url:
        return "not a data: URL or a URL with a host"
    return check_url(url, rule)
