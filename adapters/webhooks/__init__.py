"""Webhook delivery: the outbound HTTP the job runner's notifications go through."""
