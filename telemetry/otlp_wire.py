"""OTLP trace protobuf, written field by field: a request's spans are encoded once, when it
ends, and an export is those bytes joined under a resource and a scope.

Why not the SDK: its Tracer costs about 30 µs per span and its OTLP encoder about 75 µs more
(it builds a protobuf object per span, attribute and value), over 0.7 ms for the seven spans
of a request, more than the request itself. Encoding straight from the values the request
recorded costs a small fraction, and a queued request is one bytes object instead of an
object graph for the garbage collector to walk. What keeps it cheap (about 15 µs for the
seven spans of a chat request, see `docs/architecture.md`, Telemetry):

- an attribute is written as its whole `attributes` field (tag, length, KeyValue) and the
  pairs that recur from request to request (operation, provider, model, tenant, status,
  token counts...) are kept encoded in a bounded table: a dict look-up per attribute;
  values that are new for every request (ids, timings) are encoded and not kept;
- what a request's spans share (trace id, the server span as parent, the request id
  attribute) is encoded once per request (`SpanHead`), and a span is a join of a few
  ready-made pieces: the name and kind of a stage span are one cached piece, the two
  timestamps one `struct` call.

JSON (OTLP/HTTP's other encoding) was measured too: building the span dicts and `orjson`
dumping them costs about 40 µs a request and twice the bytes, which the collector then parses
more slowly. The tests decode every export with opentelemetry-proto, so the bytes cannot
drift from the schema.

Wire format: https://protobuf.dev/programming-guides/encoding/; field numbers from
opentelemetry/proto/{collector/trace/v1/trace_service,trace/v1/trace,common/v1/common,
resource/v1/resource}.proto.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

INTERNAL, SERVER, CLIENT = 1, 2, 3  # Span.SpanKind
STATUS_ERROR = 2  # Status.StatusCode
SAMPLED = 0x01  # W3C trace flags, the low byte of Span.flags
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200  # SpanFlags: whether the parent is in another process

_LEN, _I64, _VARINT, _I32 = 2, 1, 0, 5
_DOUBLE = struct.Struct("<d").pack
_FIXED64 = struct.Struct("<Q").pack
_FIXED32 = struct.Struct("<I").pack
_SMALL = [bytes((i,)) for i in range(0x80)]


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _SMALL[value]
    if value < 0:
        value += 1 << 64  # int64 in two's complement, as protobuf writes it
    if value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _field(field: int, payload: bytes) -> bytes:
    """A length-delimited field: a string, bytes or an embedded message."""
    return _tag(field, _LEN) + _varint(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    if isinstance(value, str):
        return _field(1, value.encode())
    if isinstance(value, bool):
        return _tag(2, _VARINT) + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return _tag(3, _VARINT) + _varint(value)
    if isinstance(value, float):
        return _tag(4, _I64) + _DOUBLE(value)
    if isinstance(value, Sequence):
        return _field(5, b"".join(_field(1, _any_value(item)) for item in value))
    return _field(1, str(value).encode())


def _key_value(field: int, key: str, value: Any) -> bytes:
    """One attribute as a KeyValue message in `field` of the enclosing message."""
    return _field(field, _field(1, key.encode()) + _field(2, _any_value(value)))


_SPAN_ATTRIBUTE = 9  # Span.attributes
_CACHE_MAX = 4096
# (key, value) or (key, type, value) -> the encoded Span.attributes field, for recurring pairs.
_encoded: dict[tuple[Any, ...], bytes] = {}
_keys: dict[str, bytes] = {}  # attribute name -> its encoded KeyValue.key field


def _length(size: int) -> bytes:
    if size < 0x80:
        return _SMALL[size]
    return _varint(size)


def fresh_attribute(key: str, value: Any) -> bytes:
    """One span attribute, encoded and not kept: for a value that is new every time (an id,
    a duration)."""
    encoded_key = _keys.get(key)
    if encoded_key is None:
        encoded_key = _keys[key] = _field(1, key.encode())
    any_value: bytes
    if isinstance(value, str):
        data = value.encode()
        any_value = b"\x0a" + _length(len(data)) + data  # AnyValue.string_value
    elif value.__class__ is float:
        any_value = b"\x21" + _DOUBLE(value)  # AnyValue.double_value
    else:
        any_value = _any_value(value)
    pair = encoded_key + b"\x12" + _length(len(any_value)) + any_value  # KeyValue.value
    return b"\x4a" + _length(len(pair)) + pair  # Span.attributes (9, length-delimited)


def attribute(key: str, value: Any) -> bytes:
    """One span attribute, kept encoded: for the (key, value) pairs that recur from request to
    request. A value that is new every time should go to `fresh_attribute` instead, or it
    pushes the recurring pairs out of the table."""
    # A string is never equal to a value of another type; True == 1 == 1.0 are, and each is
    # encoded differently, so other values are told apart by their type too.
    if value.__class__ is str:
        cache_key: tuple[Any, ...] = (key, value)
    else:
        cache_key = (key, value.__class__, tuple(value) if isinstance(value, list) else value)
    found = _encoded.get(cache_key)
    if found is None:
        found = fresh_attribute(key, value)
        if len(_encoded) >= _CACHE_MAX:
            _encoded.clear()  # values a client can vary (e.g. token counts): start over
        _encoded[cache_key] = found
    return found


def span_attributes(values: Mapping[str, Any]) -> bytes:
    """`values` as Span.attributes fields (not kept encoded)."""
    return b"".join([fresh_attribute(key, value) for key, value in values.items()])


_groups: dict[tuple[Any, ...], bytes] = {}


def group(key: tuple[Any, ...], values: Callable[[], Mapping[str, Any]]) -> bytes:
    """Span attributes that go together and recur together (the route of an attempt, the
    outcome of a request), kept encoded under `key`, which must tell every distinct group
    apart: `values()` is called only for a key not seen yet."""
    found = _groups.get(key)
    if found is None:
        found = span_attributes(values())
        if len(_groups) >= _CACHE_MAX:
            _groups.clear()
        _groups[key] = found
    return found


def attributes(field: int, values: Mapping[str, Any]) -> bytes:
    """`values` as repeated KeyValue in `field` of the enclosing message (not kept encoded)."""
    return b"".join([_key_value(field, key, value) for key, value in values.items()])


# Span's fields, tag (and fixed length) written out: this runs for every span.
_TRACE_ID = _tag(1, _LEN) + _varint(16)
_SPAN_ID = _tag(2, _LEN) + _varint(8)
_PARENT_SPAN_ID = _tag(4, _LEN) + _varint(8)
_TIMES = struct.Struct("<BQBQ")  # start (7) and end (8), fixed64 each
_START_TAG = (7 << 3) | _I64
_END_TAG = (8 << 3) | _I64
_FLAGS = _tag(16, _I32)
_SCOPE_SPANS_SPAN = _tag(2, _LEN)


def _name_kind(name: str, kind: int) -> bytes:
    return _field(5, name.encode()) + _tag(6, _VARINT) + _varint(kind)


def _flags(parent: bool, remote: bool) -> bytes:
    flags = SAMPLED | ((_HAS_IS_REMOTE | (_IS_REMOTE if remote else 0)) if parent else 0)
    return _FLAGS + _FIXED32(flags)


_CHILD_FLAGS = _flags(True, False)
_REMOTE_CHILD_FLAGS = _flags(True, True)
_ROOT_FLAGS = _flags(False, False)
_names: dict[tuple[str, int], bytes] = {}  # (span name, kind) -> the encoded name and kind


def _status(error: str) -> bytes:
    return _field(15, _field(2, error.encode()) + _tag(3, _VARINT) + _varint(STATUS_ERROR))


def _event(name: str, at: int) -> bytes:
    return _field(11, _tag(1, _I64) + _FIXED64(at) + _field(2, name.encode()))


def _framed(body: bytes) -> bytes:
    """A span's body as a `ScopeSpans.spans` field."""
    size = len(body)
    if size < 0x80:
        return _SCOPE_SPANS_SPAN + _SMALL[size] + body
    return _SCOPE_SPANS_SPAN + _varint(size) + body


class SpanHead:
    """What the spans of one trace under one parent share, encoded once: the trace id, the
    parent's span id and attributes every span of the request carries (the request id)."""

    __slots__ = ("_child_head", "_common", "_parent_id", "_trace_head")

    def __init__(self, trace_id: int, parent_id: int, common: bytes = b"") -> None:
        self._trace_head = _TRACE_ID + trace_id.to_bytes(16, "big") + _SPAN_ID
        self._parent_id = parent_id.to_bytes(8, "big")
        self._child_head = _PARENT_SPAN_ID + self._parent_id
        self._common = common  # encoded Span.attributes fields

    def parent(
        self,
        name: str,
        kind: int,
        start_ns: int,
        end_ns: int,
        attributes: bytes,
        *,
        remote_parent_id: int | None,
        error: str | None = None,
        events: Sequence[tuple[str, int]] = (),
    ) -> bytes:
        """The parent span itself (its parent, if any, in another process)."""
        name_kind = _names.get((name, kind))
        if name_kind is None:
            name_kind = _name_kind(name, kind)
            if len(_names) < _CACHE_MAX:
                _names[(name, kind)] = name_kind
        parts = [self._trace_head, self._parent_id]
        if remote_parent_id is not None:
            parts += (_PARENT_SPAN_ID, remote_parent_id.to_bytes(8, "big"))
        parts += (name_kind, _TIMES.pack(_START_TAG, start_ns, _END_TAG, end_ns), self._common, attributes)
        parts += [_event(event_name, at) for event_name, at in events]
        if error is not None:
            parts.append(_status(error))
        parts.append(_REMOTE_CHILD_FLAGS if remote_parent_id is not None else _ROOT_FLAGS)
        return _framed(b"".join(parts))

    def internal(
        self,
        timings: Iterable[tuple[str, float, float, str | None]],
        offset_ns: int,
        span_ids: Callable[[int], int],
        error_attribute: Callable[[str], bytes],
    ) -> list[bytes]:
        """INTERNAL child spans, one per (name, start, end, error) with times in seconds on a
        clock `offset_ns` away from the Unix epoch; `span_ids(64)` draws each span's id,
        `error_attribute(error)` encodes the attribute that a failed span carries."""
        found = []
        trace_head, child_head, tail = self._trace_head, self._child_head, self._common + _CHILD_FLAGS
        pack = _TIMES.pack
        for name, started, ended, error in timings:
            name_kind = _names.get((name, INTERNAL))
            if name_kind is None:
                name_kind = _name_kind(name, INTERNAL)
                if len(_names) < _CACHE_MAX:
                    _names[(name, INTERNAL)] = name_kind
            times = pack(_START_TAG, int(started * 1e9) + offset_ns, _END_TAG, int(ended * 1e9) + offset_ns)
            span_id = span_ids(64).to_bytes(8, "big")
            if error is None:
                body = b"".join((trace_head, span_id, child_head, name_kind, times, tail))
            else:
                failed = self._common + error_attribute(error) + _status(error) + _CHILD_FLAGS
                body = b"".join((trace_head, span_id, child_head, name_kind, times, failed))
            size = len(body)
            found.append(_SCOPE_SPANS_SPAN + (_SMALL[size] if size < 0x80 else _varint(size)) + body)
        return found

    def child(
        self,
        span_id: int,
        name: str,
        kind: int,
        start_ns: int,
        end_ns: int,
        attributes: bytes = b"",
        error: str | None = None,
    ) -> bytes:
        """A child span of the parent, sampled, in the same process. `attributes`: encoded
        Span.attributes fields besides the common ones; `error`: the status description."""
        name_kind = _names.get((name, kind))
        if name_kind is None:
            name_kind = _name_kind(name, kind)
            if len(_names) < _CACHE_MAX:
                _names[(name, kind)] = name_kind
        return _framed(
            b"".join(
                (
                    self._trace_head,
                    span_id.to_bytes(8, "big"),
                    self._child_head,
                    name_kind,
                    _TIMES.pack(_START_TAG, start_ns, _END_TAG, end_ns),
                    self._common,
                    attributes,
                    b"" if error is None else _status(error),
                    _CHILD_FLAGS,
                )
            )
        )


def span(
    trace_id: int,
    span_id: int,
    *,
    parent_id: int | None,
    parent_remote: bool = False,
    name: str,
    kind: int,
    start_ns: int,
    end_ns: int,
    span_attributes: Mapping[str, Any] | bytes,
    error: str | None = None,
    events: Sequence[tuple[str, int]] = (),
) -> bytes:
    """One sampled span, as a `ScopeSpans.spans` field ready to be joined into an export.
    `span_attributes`: a mapping, or Span.attributes fields already encoded; `error`: the
    status description of a failed span; `events`: (name, Unix ns)."""
    parts = [_TRACE_ID, trace_id.to_bytes(16, "big"), _SPAN_ID, span_id.to_bytes(8, "big")]
    if parent_id is not None:
        parts += (_PARENT_SPAN_ID, parent_id.to_bytes(8, "big"))
    parts += (
        _name_kind(name, kind),
        _TIMES.pack(_START_TAG, start_ns, _END_TAG, end_ns),
        span_attributes
        if isinstance(span_attributes, bytes)
        else attributes(_SPAN_ATTRIBUTE, span_attributes),
    )
    parts += [_event(event_name, at) for event_name, at in events]
    if error is not None:
        parts.append(_status(error))
    parts.append(_flags(parent_id is not None, parent_remote))
    return _framed(b"".join(parts))


def resource(resource_attributes: Mapping[str, Any]) -> bytes:
    """A Resource message."""
    return attributes(1, resource_attributes)


def scope(name: str, version: str | None) -> bytes:
    """An InstrumentationScope message."""
    return _field(1, name.encode()) + (_field(2, version.encode()) if version else b"")


def export_request(
    resource_message: bytes, scope_message: bytes, schema_url: str, spans: Iterable[bytes]
) -> bytes:
    """An ExportTraceServiceRequest: one resource, one scope, the spans as `span` made them."""
    schema = _field(3, schema_url.encode()) if schema_url else b""
    scope_spans = _field(1, scope_message) + b"".join(spans) + schema
    resource_spans = _field(1, resource_message) + _field(2, scope_spans) + schema
    return _field(1, resource_spans)
