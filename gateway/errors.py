"""Every error a client can see, in one place.

    GatewayError                      OpenAI-format error with an HTTP status
    ├── InvalidRequest        400     malformed JSON, wrong types, missing fields
    │   └── SensitiveDataBlocked 400  the request carries data the policy blocks (types named, never values)
    ├── AuthenticationFailed  401     missing or unknown API key
    ├── PermissionDenied      403     key may not use this model or feature
    ├── NotFound              404     unknown model alias or path
    ├── MethodNotAllowed      405
    ├── PayloadTooLarge       413     body over the configured limit
    ├── UnsupportedMediaType  415     a Content-Encoding the gateway does not decode
    ├── IdempotencyConflict   409     a request with this Idempotency-Key is still in flight
    ├── QuotaExceeded         429     a hard budget cannot cover the request (insufficient_quota)
    ├── RateLimitExceeded     429     a requests or tokens per minute limit (with Retry-After)
    ├── StateStoreUnavailable 503     budgets and limits cannot be checked (fail closed)
    ├── UpstreamError         502     the upstream answered with something unusable
    │   ├── UpstreamRejected  4xx     an upstream refused the request (its 400/413/422; type upstream_error)
    │   ├── UpstreamUnavailable 503   connection refused, overloaded, out of capacity
    │   └── UpstreamTimeout   504     no answer within the time allowed
    ├── AuditWriteFailed      503     a mandatory decision log could not be written
    ├── PolicyUnavailable     503     the policy engine failed or did not answer in time (fail closed)
    ├── RedactionFailed       500     sensitive-data detection failed; nothing was sent (fail closed)
    └── InternalError         500     a bug; the message shown is generic

Only these reach clients. Foreign exceptions (aiohttp, OSError, JSON decoders) are
translated where they are raised: the HTTP edge for request bodies, the upstream
sender for network errors. Anything else becomes InternalError with no detail.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "AuditWriteFailed",
    "AuthenticationFailed",
    "GatewayError",
    "IdempotencyConflict",
    "InternalError",
    "InvalidRequest",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "PolicyUnavailable",
    "QuotaExceeded",
    "RateLimitExceeded",
    "RedactionFailed",
    "SensitiveDataBlocked",
    "StateStoreUnavailable",
    "UnsupportedMediaType",
    "UpstreamError",
    "UpstreamRejected",
    "UpstreamTimeout",
    "UpstreamUnavailable",
    "model_not_found",
]


class GatewayError(Exception):
    status: int = 500
    type: str = "api_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.headers: dict[str, str] = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def body_bytes(self) -> bytes:
        return orjson.dumps(self.body())


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"


class AuthenticationFailed(GatewayError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class PermissionDenied(GatewayError):
    status = 403
    type = "permission_error"
    code = "permission_denied"


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


def model_not_found(alias: str) -> NotFound:
    """Unknown and forbidden aliases get this same answer, so a key cannot probe for others' models."""
    return NotFound(
        f"The model '{alias}' does not exist or you do not have access to it.",
        param="model",
        code="model_not_found",
    )


class MethodNotAllowed(GatewayError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class PayloadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UnsupportedMediaType(GatewayError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_media_type"


class UpstreamError(GatewayError):
    """The upstream failed. `retryable` says whether another attempt on the same upstream may
    succeed; whatever it says, the next candidate may still be tried."""

    status = 502
    type = "api_error"
    code = "upstream_error"
    retryable = False  # the same upstream may succeed if asked again

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool | None = None,
        retry_after: float | None = None,
        code: str | None = None,
        upstream: str | None = None,
    ) -> None:
        super().__init__(message, code=code)
        if status is not None:
            self.status = status
        if retryable is not None:
            self.retryable = retryable
        self.retry_after = retry_after
        self.upstream = upstream
        if retry_after is not None:
            self.headers["retry-after"] = str(max(1, round(retry_after)))


class UpstreamRejected(UpstreamError):
    """An upstream refused the request the gateway accepted (its 400, 413 or 422).

    The client may be at fault, or only that server (a parameter, header or size another
    server takes): its own type and code tell the two apart from the gateway's own
    invalid_request_error. Not retried on the same upstream, whose replicas run alike; the
    next candidate, if any, is tried. The status stays a 4xx: the request as sent was refused.
    """

    status = 400
    type = "upstream_error"
    code = "upstream_rejected"


class UpstreamUnavailable(UpstreamError):
    status = 503
    code = "upstream_unavailable"
    retryable = True


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"
    retryable = True


class AuditWriteFailed(GatewayError):
    status = 503
    type = "api_error"
    code = "audit_unavailable"


class PolicyUnavailable(GatewayError):
    """No decision could be had; the request is refused rather than let through unchecked."""

    status = 503
    type = "api_error"
    code = "policy_unavailable"


class SensitiveDataBlocked(InvalidRequest):
    code = "sensitive_data_blocked"

    def __init__(self, kinds: list[str]) -> None:
        super().__init__(
            f"The request contains sensitive data that policy does not allow to be sent: {', '.join(kinds)}."
        )
        self.kinds = kinds


class RedactionFailed(GatewayError):
    """Detection failed, so the request is refused rather than sent unchecked."""

    status = 500
    type = "api_error"
    code = "redaction_failed"

    def __init__(self, request_id: str) -> None:
        super().__init__(
            f"Sensitive-data detection failed, so the request was not processed (request id {request_id})."
        )


class IdempotencyConflict(GatewayError):
    status = 409
    type = "invalid_request_error"
    code = "idempotency_key_in_use"


class QuotaExceeded(GatewayError):
    """A hard budget cannot cover even the smallest allowed answer: OpenAI's insufficient_quota."""

    status = 429
    type = "insufficient_quota"
    code = "insufficient_quota"


class RateLimitExceeded(GatewayError):
    """Over a requests or tokens per minute limit; `type` says which, as OpenAI does."""

    status = 429
    type = "requests"
    code = "rate_limit_exceeded"


class StateStoreUnavailable(GatewayError):
    """The budget and rate-limit store cannot be reached; metered requests are refused."""

    status = 503
    type = "api_error"
    code = "state_store_unavailable"

    def __init__(self, message: str, *, may_have_applied: bool = False, failure: str | None = None) -> None:
        super().__init__(message)
        # The operation was sent and no answer came (a timeout, a connection lost): the
        # store may apply it later. False when it is known not to have been applied.
        self.may_have_applied = may_have_applied
        # What failed, without what it means for a request: for the commands that read the
        # store (`tollgate sessions`, `tollgate spend`).
        self.failure = failure or message


class InternalError(GatewayError):
    status = 500
    type = "api_error"
    code = "internal_error"

    def __init__(self, request_id: str | None = None) -> None:
        suffix = f" (request id {request_id})" if request_id else ""
        super().__init__(f"The gateway failed to process the request{suffix}.")
