"""Runs a pymongo application as if it set no `comment`: imported at start
by Python when this folder is on PYTHONPATH, it takes `comment` out of
every command pymongo encodes, before encoding, so the bytes on the wire
are those the driver sends for an application that names nothing.
(wirelint's tagged-equals-untagged tests; not a wirelint switch.)"""

import functools

try:
    from pymongo import message
except ImportError:  # not a pymongo application
    message = None


def _strip(encode):
    @functools.wraps(encode)
    def encode_untagged(*args, **kwargs):
        for arg in list(args) + list(kwargs.values()):
            if hasattr(arg, "pop") and hasattr(arg, "keys") and "comment" in arg:
                arg.pop("comment")
        return encode(*args, **kwargs)

    return encode_untagged


if message is not None:
    for name in ("_op_msg", "_do_batched_op_msg", "_client_do_batched_op_msg", "_query"):
        if hasattr(message, name):
            setattr(message, name, _strip(getattr(message, name)))
