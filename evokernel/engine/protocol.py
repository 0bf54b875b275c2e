"""The messages between the search process and its GPU workers: JSON, never pickle.

A worker runs untrusted candidate code in its own process, so anything it sends back is
untrusted too: unpickling it would let a kernel run code in the process that holds the API
keys. Messages are JSON objects of at most MAX_MESSAGE_BYTES, and the parent checks a result
against the candidate it sent (evokernel.engine.handle).
"""
from __future__ import annotations

import json
from multiprocessing.connection import Connection
from typing import Any

MAX_MESSAGE_BYTES = 64 * 2**20


class ProtocolError(Exception):
    """A message that is not a JSON object within the size limit."""


def send(conn: Connection, message: dict[str, Any]) -> None:
    """Send one JSON object. Raises: OSError when the other side is gone."""
    conn.send_bytes(json.dumps(message).encode())


def recv(conn: Connection) -> dict[str, Any]:
    """Receive one JSON object.

    Raises: EOFError/OSError when the other side is gone; ProtocolError for anything that is
    not a JSON object of at most MAX_MESSAGE_BYTES.
    """
    try:
        data = conn.recv_bytes(MAX_MESSAGE_BYTES)
    except OSError as e:
        if "message too long" in str(e).lower() or "bad message length" in str(e).lower():
            raise ProtocolError(f"message over {MAX_MESSAGE_BYTES} bytes") from e
        raise
    try:
        message = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"not JSON: {e}") from e
    if not isinstance(message, dict):
        raise ProtocolError(f"not a JSON object: {type(message).__name__}")
    return message
