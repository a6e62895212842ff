"""What each server worker process imports: logging set up, then the application."""

from __future__ import annotations

from gateway.app import create_app
from gateway.config import config_path_from_env, load_config
from gateway.http import GatewayASGI
from gateway.logs import configure_logging
from gateway.redaction.settings import scrubber_for


def app_factory() -> GatewayASGI:
    config = load_config(config_path_from_env())
    configure_logging(config.server.log_level, scrubber_for(config))
    return create_app(config)
