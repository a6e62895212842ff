# Tests of authz.rego against data.yaml; `tollgate policy test` runs them, and the gateway
# runs them before it accepts an edited policy.
#
# Inputs are set field by field (`with input.tenant as "demo"`), never whole
# (`with input as {...}`): the embedded engine cannot evaluate the whole-input form when
# the rule under test calls a builtin. Both forms mean the same to OPA.
#
# Lists the policy sorts from a set are compared as sets (`set_of`): the embedded engine's
# sort() of a set returns a set, which never equals an array; OPA returns an array. The
# JSON decision is the same from both.
package gateway.authz_test

import data.gateway.authz

set_of(xs) := {x | some x in xs}

test_a_listed_tenant_may_use_a_listed_model if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
	d.allow == true
	count(d.reasons) == 0
	set_of(d.route.upstreams) == {"local"}
	d.limits == {"max_tokens": 4096, "tool_output_max_chars": 16000}
}

test_an_unknown_tenant_is_denied if {
	d := authz.decision with input.tenant as "mallory"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
	d.allow == false
	set_of(d.reasons) == {"tenant mallory is not known to the policy"}
	count(d.tools.allowed) == 0
}

test_a_request_without_a_tenant_is_denied if {
	d := authz.decision with input.model as "kimi-k2.6"
	d.allow == false
	set_of(d.reasons) == {"tenant (none) is not known to the policy"}
}

test_a_model_not_listed_is_denied if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "gpt-9"
		with input.upstreams as ["local"]
	d.allow == false
	set_of(d.reasons) == {"model gpt-9 is not allowed for tenant demo"}
}

test_a_model_that_is_not_a_string_is_denied if {
	d := authz.decision with input.tenant as "demo"
		with input.model as 7
		with input.upstreams as ["local"]
	d.allow == false
}

test_a_star_allows_every_model if {
	d := authz.decision with input.tenant as "open"
		with input.model as "anything"
		with input.upstreams as ["local"]
		with data.tenants.open as {"models": ["*"]}
	d.allow == true
}

test_a_tenant_without_models_may_use_none if {
	d := authz.decision with input.tenant as "bare"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with data.tenants.bare as {}
	d.allow == false
	count(d.tools.allowed) == 0
	d.tools.on_violation == "reject"
}

test_only_listed_tools_are_allowed if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.tools as ["search", "shell"]
	d.allow == true
	set_of(d.tools.allowed) == {"fetch_url", "get_weather", "search"}
	d.tools.on_violation == "strip"
}

# The gateway refuses offered tools not allowed (tool_not_allowed): the policy only says which are.
test_unlisted_tools_are_left_to_the_gateway_when_the_tenant_rejects if {
	d := authz.decision with input.tenant as "strict"
		with input.model as "m"
		with input.upstreams as ["local"]
		with input.tools as ["shell", "search", "exec"]
		with data.tenants.strict as {"models": ["m"], "tools": ["search"]}
	d.allow == true
	set_of(d.tools.allowed) == {"search"}
	d.tools.on_violation == "reject"
}

test_a_named_tool_choice_is_left_to_the_gateway if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.tools as ["shell"]
		with input.tool_choice_name as "shell"
	d.allow == true
	not "shell" in set_of(d.tools.allowed)
}

test_a_named_allowed_tool_choice_is_fine if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.tools as ["search"]
		with input.tool_choice_name as "search"
	d.allow == true
}

test_tool_destinations_come_from_data if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
	d.tool_args.fetch_url.url.allowed_hosts == ["*.wikipedia.org", "docs.python.org"]
}

test_private_and_link_local_destinations_are_dropped if {
	hosts := [
		"10.1.2.3", "127.0.0.1", "169.254.169.254", "192.168.0.1", "172.16.0.1", "172.31.9.9",
		"100.64.0.1", "0.0.0.0", "localhost", "LOCALHOST", "metadata.localhost", "::1", "[::1]",
		"fe80::1", "fd00::1", "[fc00::1]", "::ffff:10.0.0.1", "172.32.0.1", "example.com", "fdic.gov",
	]
	d := authz.decision with input.tenant as "t"
		with input.model as "m"
		with input.upstreams as ["local"]
		with data.tenants.t as {"models": ["m"], "tools": ["fetch"], "tool_args": {"fetch": {"url": {"allowed_hosts": hosts}}}}
	d.tool_args.fetch.url.allowed_hosts == ["172.32.0.1", "example.com", "fdic.gov"]
}

test_arguments_of_tools_not_allowed_are_dropped if {
	d := authz.decision with input.tenant as "t"
		with input.model as "m"
		with input.upstreams as ["local"]
		with data.tenants.t as {"models": ["m"], "tools": [], "tool_args": {"fetch": {"url": {"allowed_hosts": ["a.com"]}}}}
	d.tool_args == {}
}

test_upstreams_are_limited_to_the_tenants_list if {
	d := authz.decision with input.tenant as "t"
		with input.model as "m"
		with input.upstreams as ["workers-ai", "local"]
		with data.tenants.t as {"models": ["m"], "upstreams": ["local"]}
	d.allow == true
	set_of(d.route.upstreams) == {"local"}
}

test_a_tenant_without_an_upstream_list_may_use_every_upstream if {
	d := authz.decision with input.tenant as "t"
		with input.model as "m"
		with input.upstreams as ["workers-ai", "local"]
		with data.tenants.t as {"models": ["m"]}
	set_of(d.route.upstreams) == {"local", "workers-ai"}
}

test_a_data_class_limits_the_upstreams if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["workers-ai", "local"]
		with input.data_class as "confidential"
	d.allow == true
	set_of(d.route.upstreams) == {"local"}
}

test_no_permitted_upstream_is_denied if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["workers-ai"]
		with input.data_class as "confidential"
	d.allow == false
	set_of(d.reasons) == {"no upstream serving model kimi-k2.6 may receive this tenant's data"}
}

test_an_unknown_data_class_is_denied if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.data_class as "top-secret"
	d.allow == false
	"unknown data class top-secret" in d.reasons
}

test_redaction_comes_from_the_tenant_over_the_defaults if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
	d.redact == {"request": "mask", "response": "off", "entities": ["EMAIL", "CREDIT_CARD", "API_KEY"]}
}

test_redaction_defaults_apply_without_a_tenant_setting if {
	d := authz.decision with input.tenant as "t"
		with input.model as "m"
		with input.upstreams as ["local"]
		with data.tenants.t as {"models": ["m"]}
	d.redact == {"request": "off", "response": "off", "entities": []}
}

test_an_exhausted_budget_is_left_to_the_meter if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.budget as "exceeded"
	d.allow == true
}

test_a_soft_exceeded_budget_lowers_max_tokens if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.budget as "soft_exceeded"
	d.allow == true
	d.limits.max_tokens == 1024
}

test_tenant_limits_override_the_defaults if {
	d := authz.decision with input.tenant as "t"
		with input.model as "m"
		with input.upstreams as ["local"]
		with data.tenants.t as {"models": ["m"], "limits": {"max_tokens": 256}}
	d.limits == {"max_tokens": 256, "tool_output_max_chars": 16000}
}

test_image_urls_may_point_at_any_public_https_host_by_default if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
	d.destinations.image_url.allowed_hosts == ["*"]
	d.destinations.image_url.allowed_schemes == ["https"]
}

test_a_tenant_narrows_image_hosts_without_private_ones if {
	hosts := ["cdn.example.com", "10.0.0.8", "localhost"]
	d := authz.decision with input.tenant as "t"
		with input.model as "m"
		with input.upstreams as ["local"]
		with data.tenants.t as {"models": ["m"], "destinations": {"image_url": {"allowed_hosts": hosts}}}
	d.destinations.image_url.allowed_hosts == ["cdn.example.com"]
}

test_webhooks_may_point_at_any_public_https_host_by_default if {
	d := authz.decision with input.tenant as "demo"
		with input.endpoint as "webhooks"
		with input.model as null
		with input.upstreams as []
	d.allow
	d.destinations.webhook_url == {"allowed_hosts": ["*"], "allowed_schemes": ["https"]}
}

test_a_webhook_decision_needs_a_known_tenant if {
	d := authz.decision with input.tenant as "nobody"
		with input.endpoint as "webhooks"
		with input.model as null
		with input.upstreams as []
	not d.allow
}

test_a_tenant_narrows_webhook_hosts_without_private_ones if {
	rule := {"allowed_hosts": ["hooks.example.com", "127.0.0.1", "localhost"], "allowed_schemes": ["https"]}
	d := authz.decision with input.tenant as "t"
		with input.endpoint as "webhooks"
		with input.model as null
		with input.upstreams as []
		with data.tenants.t as {"models": ["m"], "destinations": {"webhook_url": rule}}
	d.allow
	d.destinations.webhook_url.allowed_hosts == ["hooks.example.com"]
}

test_a_tenant_may_name_private_webhook_hosts_explicitly if {
	rule := {"allowed_hosts": ["127.0.0.1"], "allowed_schemes": ["http"], "allow_private": true}
	d := authz.decision with input.tenant as "t"
		with input.endpoint as "webhooks"
		with input.model as null
		with input.upstreams as []
		with data.tenants.t as {"models": ["m"], "destinations": {"webhook_url": rule}}
	d.destinations.webhook_url == rule
}

test_a_session_gets_the_limits_its_data_gives if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with data.tenants.demo.session as {"max_usd": 5, "max_input_tokens": 100000}
	d.session == {"max_usd": 5, "max_input_tokens": 100000}
}

test_a_long_session_is_told_to_summarize if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.session_state as {"turns": "64+", "tokens": "100k-1M", "spend": "$1-$10", "growth": "1k-10k"}
	d.session == {"checkpoint": {"mode": "advise", "every_turns": 16}}
}

test_a_short_session_gets_no_checkpoint if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.session_state as {"turns": "8-15", "tokens": "10k-100k", "spend": "<$0.01", "growth": "<1k"}
	d.session == {}
}

test_a_checkpoint_in_the_data_is_kept_for_a_long_session if {
	d := authz.decision with input.tenant as "demo"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.session_state as {"turns": "64+", "tokens": "1M+", "spend": "$10+", "growth": "10k+"}
		with data.tenants.demo.session as {"checkpoint": {"mode": "compact"}}
	d.session == {"checkpoint": {"mode": "compact"}}
}

# --- which model serves the request ----------------------------------------------------

test_an_extraction_workflow_is_served_by_the_economy_alias if {
	d := authz.decision with input.tenant as "demo"
		with data.tenants.demo.models as ["kimi-k2.6", "economy"]
		with input.endpoint as "chat.completions"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.workflow as "extraction"
		with input.budget as "ok"
	d.allow == true
	d.route.alias == "economy"
	d.route.model_class == "economy"
	set_of(d.route.upstreams) == {"local", "workers-ai", "gpu-pool"}
}

test_a_workflow_without_a_class_stays_on_its_model if {
	d := authz.decision with input.tenant as "demo"
		with input.endpoint as "chat.completions"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.workflow as "reasoning"
	d.allow == true
	not d.route.alias
	not d.route.model_class
	set_of(d.route.upstreams) == {"local"}
}

test_a_soft_exceeded_budget_downgrades_normal_work if {
	d := authz.decision with input.tenant as "demo"
		with data.tenants.demo.models as ["kimi-k2.6", "economy"]
		with input.endpoint as "chat.completions"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.priority as "normal"
		with input.budget as "soft_exceeded"
	d.route.alias == "economy"
	d.route.model_class == "economy"
}

test_a_soft_exceeded_budget_leaves_critical_work_on_its_model if {
	d := authz.decision with input.tenant as "demo"
		with input.endpoint as "chat.completions"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.priority as "critical"
		with input.budget as "soft_exceeded"
	d.allow == true
	not d.route.alias
}

test_a_routed_request_keeps_its_data_class_upstreams if {
	d := authz.decision with input.tenant as "open"
		with input.endpoint as "chat.completions"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.workflow as "extraction"
		with input.data_class as "confidential"
		with data.tenants.open as {"models": ["*"]}
	d.route.alias == "economy"
	set_of(d.route.upstreams) == {"local"}
}

test_a_routed_request_with_no_upstream_restriction_may_use_any if {
	d := authz.decision with input.tenant as "open"
		with input.endpoint as "chat.completions"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.workflow as "extraction"
		with data.tenants.open as {"models": ["*"]}
	d.route.alias == "economy"
	not d.route.upstreams
}

test_no_route_to_an_alias_the_tenant_may_not_use if {
	d := authz.decision with input.tenant as "narrow"
		with input.endpoint as "chat.completions"
		with input.model as "kimi-k2.6"
		with input.upstreams as ["local"]
		with input.workflow as "extraction"
		with data.tenants.narrow as {"models": ["kimi-k2.6"]}
	d.allow == true
	not d.route.alias
}

test_embeddings_are_not_routed if {
	d := authz.decision with input.tenant as "demo"
		with input.endpoint as "embeddings"
		with input.model as "embeddings"
		with input.upstreams as ["local"]
		with input.workflow as "extraction"
	not d.route.alias
}

# --- defer (self-contained: data.routing and the tenant are given here) ----------------------

test_background_work_is_deferred_while_an_upstream_throttles if {
	d := authz.decision with input.tenant as "t" with input.model as "m"
		with input.priority as "background"
		with input.capacity as "throttled"
		with input.budget as "ok"
		with data.tenants.t as {"models": ["m"]}
		with data.routing as {"defer_background": true}
	d.allow == true
	d.defer == true
}

test_background_work_is_deferred_once_a_soft_budget_is_used_up if {
	d := authz.decision with input.tenant as "t" with input.model as "m"
		with input.priority as "background"
		with input.capacity as "ok"
		with input.budget as "soft_exceeded"
		with data.tenants.t as {"models": ["m"]}
		with data.routing as {"defer_background": true}
	d.defer == true
}

test_background_work_is_not_deferred_while_capacity_is_there if {
	d := authz.decision with input.tenant as "t" with input.model as "m"
		with input.priority as "background"
		with input.capacity as "ok"
		with input.budget as "ok"
		with data.tenants.t as {"models": ["m"]}
		with data.routing as {"defer_background": true}
	d.defer == false
}

test_normal_and_critical_work_is_never_deferred if {
	every priority in ["normal", "critical"] {
		d := authz.decision with input.tenant as "t" with input.model as "m"
			with input.priority as priority
			with input.capacity as "throttled"
			with input.budget as "soft_exceeded"
			with data.tenants.t as {"models": ["m"]}
			with data.routing as {"defer_background": true}
		d.defer == false
	}
}

test_nothing_is_deferred_unless_data_says_so if {
	d := authz.decision with input.tenant as "t" with input.model as "m"
		with input.priority as "background"
		with input.capacity as "throttled"
		with data.tenants.t as {"models": ["m"]}
		with data.routing as {}
	d.defer == false
}
