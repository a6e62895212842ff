# Tollgate's default policy: which tenants may use which models and tools, where tool
# arguments may point, which redaction applies and which upstreams may receive a tenant's
# data. What it reads is in data.yaml beside it; the input document and the decision are
# described in docs/policies.md. Rego v1; `tollgate policy test` runs authz_test.rego.
#
# Safe by default: an unknown tenant is denied, no tool is allowed unless listed, and
# private, loopback and link-local hosts are dropped from every tool destination list.
package gateway.authz

default tenant := {}

tenant := data.tenants[input.tenant]

default defaults := {}

defaults := data.defaults

decision := {
	"allow": allow,
	"reasons": reasons,
	"tools": {"allowed": sort(allowed_tools), "on_violation": on_tool_violation},
	"tool_args": tool_args,
	"destinations": {"image_url": without_private_hosts(image_url_rule), "webhook_url": webhook_url_destination},
	"redact": object.union(object.get(defaults, "redact", {}), object.get(tenant, "redact", {})),
	"route": route,
	"limits": limits,
	"session": session_rules,
	"defer": defer,
}

# Allow needs the positive facts as well as an empty deny set, so that a deny rule that
# fails to fire (an undefined value in its message, say) can never turn into an allow.
default allow := false

allow if {
	known_tenant
	model_allowed
	count(deny) == 0
}

# A decision on the tenant's webhook destinations (registering a URL, delivering an event)
# names no model: the tenant is all it needs, and destinations.webhook_url says where.
allow if {
	known_tenant
	webhooks_input
	count(deny) == 0
}

webhooks_input if input.endpoint == "webhooks"

reasons := sort(deny) if count(deny) > 0

reasons := [] if allow

reasons := ["denied by policy"] if {
	not allow
	count(deny) == 0
}

# Messages are built with concat, not sprintf: the embedded engine (regopy) prints a
# string returned by another builtin inside sprintf with stray quotes.
tenant_name := as_text(object.get(input, "tenant", null))

model_name := as_text(object.get(input, "model", null))

as_text(value) := value if is_string(value)

as_text(value) := "(none)" if not is_string(value)

# --- who -----------------------------------------------------------------------------

known_tenant if data.tenants[input.tenant]

deny contains concat("", ["tenant ", tenant_name, " is not known to the policy"]) if not known_tenant

# A used-up hard budget (input.budget == "exceeded") is not denied here: the meter refuses
# the request with 429 insufficient_quota, from the exact figures rather than a cached band.

# --- which model ---------------------------------------------------------------------

model_allowed if "*" in tenant.models

model_allowed if input.model in tenant.models

deny contains msg if {
	known_tenant
	not model_allowed
	not webhooks_input
	msg := concat("", ["model ", model_name, " is not allowed for tenant ", tenant_name])
}

# --- which tools ---------------------------------------------------------------------

allowed_tools := {name | some name in object.get(tenant, "tools", [])}

default on_tool_violation := "reject"

on_tool_violation := tenant.on_tool_violation

on_tool_violation := defaults.on_tool_violation if not tenant.on_tool_violation

# Offered tools and a named tool_choice are not denied here: the gateway's tool guard
# enforces `tools` (strip, or 403 tool_not_allowed naming the tools), so that a client
# gets the one documented answer whichever policy decides.

# --- where tool arguments may point --------------------------------------------------

tool_args := {tool: {path: without_private_hosts(rule) | some path, rule in paths} |
	some tool, paths in object.get(tenant, "tool_args", {})
	tool in allowed_tools
}

without_private_hosts(rule) := object.union(rule, {"allowed_hosts": [host |
	some host in object.get(rule, "allowed_hosts", [])
	not private_host(host)
]})

private_host(host) if ascii_lower(host) in {"localhost", "localhost.localdomain", "ip6-localhost", "0.0.0.0", "::", "::1", "[::1]"}

private_host(host) if endswith(ascii_lower(host), ".localhost")

# Dotted-quad literals are matched octet by octet: cheaper in the engine than a prefix scan.
private_host(host) if {
	octets := split(host, ".")
	count(octets) == 4
	private_ipv4(octets)
}

private_ipv4(octets) if octets[0] in {"0", "10", "127"}

private_ipv4(octets) if [octets[0], octets[1]] in {["169", "254"], ["192", "168"], ["100", "64"]}

private_ipv4(octets) if {
	octets[0] == "172"
	octets[1] in {"16", "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27", "28", "29", "30", "31"}
}

private_host(host) if {
	contains(host, ":")
	some prefix in {"fc", "fd", "fe80:", "::ffff:"}
	startswith(ascii_lower(trim(host, "[]")), prefix)
}

# Not `lower`: OPA lowers every letter, the embedded engine only A-Z. Host names are
# ASCII (an internationalised name travels as punycode), so A-Z is all there is to lower.
ascii_lower(text) := strings.replace_n(ascii_upper_to_lower, text)

ascii_upper_to_lower := {
	"A": "a", "B": "b", "C": "c", "D": "d", "E": "e", "F": "f", "G": "g", "H": "h", "I": "i",
	"J": "j", "K": "k", "L": "l", "M": "m", "N": "n", "O": "o", "P": "p", "Q": "q", "R": "r",
	"S": "s", "T": "t", "U": "u", "V": "v", "W": "w", "X": "x", "Y": "y", "Z": "z",
}

# --- where URLs the upstream fetches may point -----------------------------------------

# Image URLs in messages (data: URLs always pass): the tenant's rule, else the one in
# defaults, else any public host over https. Private hosts are dropped, as for tools.
default_image_url_rule := object.get(
	object.get(defaults, "destinations", {}), "image_url",
	{"allowed_hosts": ["*"], "allowed_schemes": ["https"]},
)

image_url_rule := object.get(object.get(tenant, "destinations", {}), "image_url", default_image_url_rule)

# Webhook URLs the tenant's completion events are delivered to (docs/async.md): the tenant's
# rule, else the one in defaults, else any public host over https. Private hosts are
# dropped unless the rule says allow_private: true (a receiver on the tenant's own network);
# the gateway refuses private addresses the rule does not name, and its config
# (jobs.webhook_hosts, jobs.webhook_allow_private) bounds whatever the policy allows.
default_webhook_url_rule := object.get(
	object.get(defaults, "destinations", {}), "webhook_url",
	{"allowed_hosts": ["*"], "allowed_schemes": ["https"]},
)

webhook_url_rule := object.get(object.get(tenant, "destinations", {}), "webhook_url", default_webhook_url_rule)

webhook_url_destination := webhook_url_rule if object.get(webhook_url_rule, "allow_private", false) == true

webhook_url_destination := without_private_hosts(webhook_url_rule) if object.get(webhook_url_rule, "allow_private", false) != true

# --- which upstreams may receive the data --------------------------------------------

# Only an array counts: OPA stops with an error on count(null), regopy does not.
default offered_upstreams := []

offered_upstreams := input.upstreams if is_array(input.upstreams)

permitted_upstreams := {name |
	some name in offered_upstreams
	tenant_may_send(name)
	class_may_send(name)
}

tenant_may_send(_) if not tenant.upstreams

tenant_may_send(name) if name in tenant.upstreams

# Bound with a default: `not is_string(input.data_class)` is true in the embedded engine
# but undefined in OPA when the field is absent (docs/policies.md, "Writing Rego for both engines").
default data_class := null

data_class := input.data_class

class_may_send(_) if not is_string(data_class)

class_may_send(name) if name in data.data_classes[data_class].upstreams

deny contains msg if {
	is_string(data_class)
	not data.data_classes[data_class]
	msg := concat("", ["unknown data class ", data_class])
}

deny contains msg if {
	model_allowed
	count(offered_upstreams) > 0
	count(permitted_upstreams) == 0
	msg := concat("", ["no upstream serving model ", model_name, " may receive this tenant's data"])
}

# --- limits the gateway enforces -----------------------------------------------------

limits := object.union(base_limits, budget_limits)

base_limits := object.union(object.get(defaults, "limits", {}), object.get(tenant, "limits", {}))

default budget_limits := {}

budget_limits := {"max_tokens": defaults.soft_budget_max_tokens} if {
	input.budget == "soft_exceeded"
	defaults.soft_budget_max_tokens < object.get(base_limits, "max_tokens", defaults.soft_budget_max_tokens + 1)
}

# --- sessions: per-session limits and checkpoints --------------------------------------

# The `session` objects of defaults and of the tenant (data.yaml), the tenant's over them.
base_session := object.union(object.get(defaults, "session", {}), object.get(tenant, "session", {}))

# A long session (64 turns or more, or past a million tokens) is told to summarize, unless
# the data already gives sessions a checkpoint.
default session_state := {}

session_state := input.session_state if is_object(input.session_state)

long_session if object.get(session_state, "turns", "0") == "64+"

long_session if object.get(session_state, "tokens", "0") == "1M+"

long_session_checkpoint := object.get(defaults, "long_session_checkpoint", {}) if {
	long_session
	not base_session.checkpoint
}

default session_rules := {}

session_rules := base_session if not long_session_checkpoint

session_rules := object.union(base_session, {"checkpoint": long_session_checkpoint}) if long_session_checkpoint

# --- which model serves the request ----------------------------------------------------

# Two rules, from data.routing: a workflow's model class (workflow_classes), and the
# economy class for a request that is not critical once a soft budget is used up
# (downgrade_class), which wins. A class moves the request only when class_aliases names
# an alias serving it that the tenant may use; the decision then names both (route.alias
# and route.model_class), and the gateway serves the request from that alias's candidates
# of that class, prices its reservation on them, and says so (x-tollgate-routed-alias).
default route_data := {}

route_data := data.routing

default priority := "normal"

priority := input.priority if is_string(input.priority)

default workflow := "default"

workflow := input.workflow if is_string(input.workflow)

downgrade if {
	input.budget == "soft_exceeded"
	priority != "critical"
	is_string(object.get(route_data, "downgrade_class", null))
}

wanted_class := route_data.downgrade_class if downgrade

wanted_class := workflow_class if {
	not downgrade
	is_string(workflow_class)
}

default workflow_class := null

workflow_class := object.get(object.get(route_data, "workflow_classes", {}), workflow, null)

default routed_alias := null

routed_alias := target if {
	input.endpoint == "chat.completions"
	target := object.get(object.get(route_data, "class_aliases", {}), wanted_class, null)
	is_string(target)
	target != input.model
	alias_allowed(target)
}

alias_allowed(_) if "*" in tenant.models

alias_allowed(target) if target in tenant.models

default class_route := {}

class_route := {"alias": routed_alias, "model_class": wanted_class} if is_string(routed_alias)

route := object.union(upstream_route, class_route)

upstream_route := {"upstreams": sort(permitted_upstreams)} if not is_string(routed_alias)

# Served from another alias: the upstreams the tenant and the data class permit, whichever
# alias serves them; null (any) when neither restricts.
upstream_route := {"upstreams": sort(routed_upstreams)} if {
	is_string(routed_alias)
	upstreams_restricted
}

upstream_route := {} if {
	is_string(routed_alias)
	not upstreams_restricted
}

upstreams_restricted if tenant.upstreams

upstreams_restricted if is_string(data_class)

routed_upstreams := {name |
	some name in object.get(tenant, "upstreams", object.get(object.get(data.data_classes, data_class, {}), "upstreams", []))
	class_may_send(name)
}

# --- whether the request waits ------------------------------------------------------------

# Background work steps aside while capacity is short: an upstream is throttling
# (input.capacity) or a soft budget is used up. The gateway answers a synchronous request
# 429 deferred (Retry-After), and stores an async one (input.async) as the job it already is;
# it honours defer for background requests only, and never moves the request elsewhere.
default defer := false

defer if {
	object.get(route_data, "defer_background", false) == true
	priority == "background"
	capacity_short
}

capacity_short if input.capacity == "throttled"

capacity_short if input.budget == "soft_exceeded"
