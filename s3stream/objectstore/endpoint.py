"""Endpoint and store URLs as they may be shown and given to botocore: secrets masked, credentials refused.

Kept apart from ``url`` (which opens backends, the S3 one among them) so the S3 backend can use it too.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from s3stream.base.errors import InvalidRequest

__all__ = ["display_url", "validate_endpoint_url"]

_SECRET_NAME = re.compile(r"secret|password|passwd|token|credential|signature|(^|_)key$|access",
                          re.IGNORECASE)


def validate_endpoint_url(endpoint: str) -> str:
    """``endpoint`` if it is an ``http(s)://HOST[:PORT][/PATH]`` URL without credentials, else InvalidRequest.

    Checked before botocore sees it: its debug log prints the endpoint whole (a ``user:password@`` in it
    too), and it reports a malformed one as a bare ValueError.
    """
    try:
        parts = urlsplit(endpoint)
        port = parts.port  # raises ValueError for a port that is not a number in [0, 65535]
    except ValueError:
        port = -1
        parts = urlsplit("")
    if "@" in parts.netloc:
        raise InvalidRequest("endpoint_url must not carry credentials; use the AWS credential chain "
                             f"(environment, profile, instance role): {display_url(endpoint)!r}")
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or port == -1 \
            or parts.query or parts.fragment:
        raise InvalidRequest(f"endpoint_url {display_url(endpoint)!r} is not an http(s)://HOST[:PORT] URL")
    return endpoint


def display_url(url: str) -> str:
    """``url`` with anything secret-looking replaced by ``***``: userinfo and secret-named params."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if _SECRET_NAME.search(k) else display_url(v) if "://" in v else v)
                           for k, v in pairs], safe=":/*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
