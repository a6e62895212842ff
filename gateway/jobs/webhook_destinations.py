"""May a tenant's webhook point at this URL? The policy's word, within the operator's bound.

Asked when a webhook is registered and again before each delivery (the policy may have
changed since). A URL passes when

- the operator's bound allows it: a host `jobs.webhook_hosts` lists ("*": any public
  host), and never a private, loopback or link-local address unless
  `jobs.webhook_allow_private` (then "*" lets the policy decide on those too; a narrower
  list must name them);
- the policy allows it: its decision for the tenant's webhooks (input endpoint "webhooks",
  recorded in the decision log) allows, and `destinations.webhook_url` admits the URL:
  its schemes, its hosts, its path prefixes; a private address only where the rule says
  `allow_private` and a pattern names the address (gateway/tools/hosts.py).

Without a policy block, the decision is the default one: any public host over https.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.config import JobsConfig
from gateway.exchange import Principal
from gateway.policy.decision import ArgConstraint, Destinations
from gateway.stages.decide import Decide
from gateway.tools.destinations import check_url, has_unsafe_chars

_DEFAULT_RULE = Destinations().webhook_url


class WebhookDestinations:
    def __init__(self, config: JobsConfig, decide: Callable[[], Decide | None]) -> None:
        """`decide`: the decide stage of the pipeline in force (None without a policy)."""
        unbounded = config.webhook_allow_private and "*" in config.webhook_hosts
        self._bound = (
            None
            if unbounded
            else ArgConstraint(
                allowed_hosts=tuple(config.webhook_hosts),
                allowed_schemes=("https", "http"),
                allow_private=config.webhook_allow_private,
            )
        )
        self._decide = decide

    async def refusal(
        self, tenant: str, principal: Principal | None, url: str, request_id: str
    ) -> str | None:
        """None when the tenant's webhook may point at `url`, else why not (a sentence for
        the client); the policy's decision is logged under `request_id`."""
        if not url or has_unsafe_chars(url):
            return "'url' must be an absolute URL."
        if self._bound is not None:
            reason = check_url(url, self._bound)
            if reason is not None:
                return f"This webhook URL is outside what the gateway allows: {reason}."
        decide = self._decide()
        rule = _DEFAULT_RULE
        if decide is not None:
            decision = await decide.for_webhooks(tenant, principal, request_id)
            if not decision.allow:
                reasons = "; ".join(decision.reasons) or "no reason given"
                return f"The policy denies this tenant's webhooks: {reasons}."
            rule = decision.destinations.webhook_url
        reason = check_url(url, rule)
        return None if reason is None else f"The policy does not allow this webhook URL: {reason}."
