"""Reading a GET response body into Arrow's pooled memory, for :meth:`S3ObjectStore.get_view`.

``StreamingBody.read()`` returns a fresh ``bytes`` per GET; a body of MiBs is fresh pages from the kernel
each time (page faults and zeroing: ~9% of a sequential read's client CPU against SeaweedFS, measured).
Here the body goes from the socket straight into a buffer from Arrow's pool, whose pages are reused:
``readinto`` on the HTTP response under urllib3 (urllib3's own ``readinto`` reads into a temporary
``bytes`` first, which is the copy this avoids).

That reaches past botocore's and urllib3's public surface, so it is taken only when the body is exactly
the plain shape this was written for: a ``StreamingBody`` (not a checksum-validating one) over a urllib3
response with no content encoding and a known length. Anything else is read with ``read()`` as before.
The length is checked as botocore checks it; a failed or short read discards the connection and raises
an urllib3 error, which the store's retry classifies like any other broken response.
"""

from __future__ import annotations

import http.client
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import urllib3.exceptions
from botocore.response import StreamingBody
from urllib3.response import HTTPResponse

__all__ = ["read_body", "read_body_pooled"]


def read_body(resp: Mapping[str, Any]) -> bytes:
    """The whole body of a ``get_object`` response, as botocore reads it."""
    with resp["Body"] as stream:
        data: bytes = stream.read()
    return data


def read_body_pooled(resp: Mapping[str, Any]) -> memoryview:
    """The whole body of a ``get_object`` response, in pooled memory where the body's shape allows."""
    body = resp["Body"]
    length = resp.get("ContentLength")
    raw = getattr(body, "_raw_stream", None)
    fp = getattr(raw, "_fp", None)
    if (type(body) is not StreamingBody or not isinstance(raw, HTTPResponse)
            or not isinstance(fp, http.client.HTTPResponse) or not isinstance(length, int) or length < 0
            or raw.headers.get("content-encoding", "identity").lower() != "identity"):
        return memoryview(read_body(resp))
    view = memoryview(pa.allocate_buffer(length)).cast("B")
    got = 0
    try:
        while got < length:
            step = fp.readinto(view[got:])
            if not step:
                raise urllib3.exceptions.IncompleteRead(got, length - got)
            got += step
    except (OSError, http.client.HTTPException) as exc:
        raw.close()  # the connection is in an unknown state: never back to the pool
        raise urllib3.exceptions.ProtocolError(f"GET body read failed after {got} of {length} bytes", exc) from exc
    except BaseException:
        raw.close()
        raise
    raw.release_conn()
    return view.toreadonly()
