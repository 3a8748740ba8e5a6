"""Checking Python arguments and turning seconds into the C library's milliseconds.

Python callers give times in seconds (int or float); the C ABI takes int64
milliseconds. Everything a caller passes is checked here first, so that a
wrong type is a TypeError and a wrong value an InvalidArgument (a
ValueError) with a message in the caller's terms (seconds, not ms).
"""
import math

from ._errors import invalid

# Waits are bounded only by int64: anything above this many ms is clamped
# ("forever" in practice, ~146 million years).
_MAX_MS = 2**62

# The C library refuses leases over 366 days. Checked here first, so that
# the message is in the caller's seconds: the library would name the ms of
# the converted value (1e300 s: the 2**62 ms it was clamped to).
_MAX_LEASE_S = 366 * 24 * 3600


def _number(value, what):
    # bool is an int, but True seconds is a mistake, not a duration.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    if isinstance(value, float) and math.isnan(value):
        raise invalid(f"{what} must be a number of seconds, not NaN")
    return value


def to_ms(seconds):
    """Seconds -> whole ms, rounded up (never shorter than asked), clamped."""
    if seconds == math.inf:
        return _MAX_MS
    # round() first: 1.1 * 1000 is 1100.0000000000002, which is 1100 ms.
    ms = math.ceil(round(seconds * 1000, 6))
    return min(ms, _MAX_MS)


def wait_ms(blocking, timeout):
    """acquire()'s (blocking, timeout) -> the C wait: 0 once, <0 forever, >0 at most."""
    if not blocking:
        if timeout != -1 and timeout is not None:
            raise invalid("can't specify a timeout for a non-blocking call")
        return 0
    if timeout is None or (timeout == -1 and not isinstance(timeout, bool)):
        return -1
    _number(timeout, "timeout")
    if timeout < 0:
        raise invalid(f"timeout must be -1 (forever) or >= 0 seconds, got {timeout!r}")
    return to_ms(timeout)


def lease_ms(lease, what="lease"):
    """A lease in seconds -> ms; None -> 0 (the watchdog keeps the lock alive)."""
    if lease is None:
        return 0
    _number(lease, what)
    if lease <= 0 or lease == math.inf:
        raise invalid(f"{what} must be a positive finite number of seconds, or None for "
                      f"the watchdog, got {lease!r}")
    if lease > _MAX_LEASE_S:
        raise invalid(f"{what} of {lease!r} seconds is longer than 366 days "
                      f"({_MAX_LEASE_S} seconds)")
    return to_ms(lease)


def lease_refused(error, seconds, what="lease"):
    """The C library's refusal of a lease (told in ms), led by the caller's seconds.

    What is left for it to refuse is a lease too short for the clock drift
    allowance, which depends on the client's drift_factor.
    """
    if seconds is None:
        return error
    return invalid(f"{what} of {seconds!r} seconds refused: {error.detail}")


def option_ms(name, value):
    """A time option of Client(), in seconds -> the ms text of the C option string."""
    _number(value, name)
    if value < 0 or value == math.inf:
        raise invalid(f"{name} must be >= 0 seconds and finite, got {value!r}")
    return str(to_ms(value))


def text(value, what):
    """A str argument that goes to C as a NUL-terminated string."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise invalid(f"{what} must not be empty")
    if "\0" in value:
        raise invalid(f"{what} must not contain NUL characters")
    try:
        value.encode("utf-8")  # what the C library gets
    except UnicodeEncodeError as e:
        raise invalid(f"{what} cannot be encoded as UTF-8 ({e.reason} at index {e.start})") \
            from None
    return value


def fenced_args(key, value, token):
    """fenced_set's arguments, checked: the key (a str), the value as bytes
    (a str as UTF-8) and the token (an int, 1 to 2**64-1)."""
    key = text(key, "key")
    if isinstance(value, str):
        value = value.encode("utf-8")
    elif isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    elif not isinstance(value, bytes):
        raise TypeError(f"value must be bytes or str, not {type(value).__name__}")
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"token must be an int, not {type(token).__name__}")
    if not 1 <= token < 2**64:
        raise invalid(f"token must be 1 to 2**64-1 (a lock's fencing_token), got {token}")
    return key, value, token


def ttl_seconds(ms):
    """A lock's TTL as Redis says it (ms; -2 no key, -1 no expiry) in
    seconds: None, math.inf, or a float."""
    if ms == -2:
        return None
    if ms == -1:
        return math.inf
    return ms / 1000


def owner_id(owner):
    """Lock owner: None -> 0 (the calling thread), else an explicit 64-bit id."""
    if owner is None:
        return 0
    if isinstance(owner, bool) or not isinstance(owner, int):
        raise TypeError(f"owner must be an int or None, not {type(owner).__name__}")
    if owner <= 0:
        raise invalid(f"owner must be a positive int (None: the calling thread), got {owner}")
    if owner >= 2**62:  # the library's rule: thread owners are numbered from 2**62
        raise invalid(f"owner {owner} is too large: explicit owners are 1 to 2**62-1")
    return owner
