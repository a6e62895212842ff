"""Policy: the input document the gateway builds, the decision it gets back, and the
stage that asks. The engines that evaluate Rego live in adapters/policy/."""
