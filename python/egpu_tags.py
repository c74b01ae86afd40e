"""egpu's context tags from Python: which request or job a thread's GPU work belongs to.

Under egpu's preloaded library (``egpu run``), every kernel launch, copy and allocation a thread
makes carries the thread's tags in its context (``tag_id``, ``trace_id``, ``span_id``), so host
probes count a request's own launches and bytes. This module sets them through the functions the
library exports, with ``ctypes`` alone (no dependency); without egpu it does nothing.

    import egpu_tags

    with egpu_tags.tag(request_number):
        model(batch)                      # launches carry tag_id = request_number

    with egpu_tags.traceparent(headers["traceparent"]):   # W3C trace context
        model(batch)                      # launches carry trace_id and span_id

Tags belong to the thread that sets them; each ``with`` gives the previous tags back at its end.
"""

import contextlib
import ctypes

__all__ = ["available", "current", "set_tag", "tag", "trace", "traceparent"]

_process = ctypes.CDLL(None)


def _function(name, restype, argtypes):
    try:
        f = getattr(_process, name)
    except AttributeError:
        return None
    f.restype, f.argtypes = restype, argtypes
    return f


_Words = ctypes.c_uint64 * 4
_tag_set = _function("egpu_tag_set", ctypes.c_uint64, [ctypes.c_uint64])
_traceparent_set = _function("egpu_traceparent_set", ctypes.c_int, [ctypes.c_char_p])
_tags_get = _function("egpu_tags_get", None, [ctypes.POINTER(_Words)])
_tags_put = _function("egpu_tags_put", None, [ctypes.POINTER(_Words)])


def available():
    """Whether the process runs under egpu's preloaded library (tags reach the contexts)."""
    return None not in (_tag_set, _traceparent_set, _tags_get, _tags_put)


def _get():
    words = _Words()
    if available():
        _tags_get(ctypes.byref(words))
    return words


def _put(words):
    if available():
        _tags_put(ctypes.byref(words))


def current():
    """The thread's tags: (tag id, trace id as an int of 128 bits, span id); zeros for none."""
    w = _get()
    return w[0], w[1] << 64 | w[2], w[3]


def set_tag(tag_id):
    """Sets the thread's tag id (0: none), its trace context kept; returns the previous one."""
    return _tag_set(tag_id) if available() else 0


@contextlib.contextmanager
def _scope(words):
    saved = _get()
    _put(words)
    try:
        yield
    finally:
        _put(saved)


def tag(tag_id):
    """A ``with`` block whose work carries ``tag_id`` (the trace context kept)."""
    w = _get()
    w[0] = tag_id
    return _scope(w)


def trace(trace_id, span_id):
    """A ``with`` block whose work carries the W3C trace id (128 bits) and parent span id."""
    w = _get()
    w[1], w[2], w[3] = trace_id >> 64, trace_id & (2**64 - 1), span_id
    return _scope(w)


def traceparent(header):
    """A ``with`` block whose work carries the trace context of a W3C ``traceparent`` header
    (``00-<32 hex>-<16 hex>-<2 hex>``); ``ValueError`` for one that is not."""
    parts = header.strip().split("-")
    hexdigits = set("0123456789abcdef")
    sizes = [2, 32, 16, 2]
    if (len(parts) != 4 or parts[0] != "00"
            or any(len(p) != n or not set(p) <= hexdigits for p, n in zip(parts, sizes))
            or int(parts[1], 16) == 0 or int(parts[2], 16) == 0):
        raise ValueError(f"not a W3C traceparent: {header!r}")
    return trace(int(parts[1], 16), int(parts[2], 16))
