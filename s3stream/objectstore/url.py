"""Store URLs: parse them, open the ObjectStore they name, and print them without secrets.

Accepted forms::

    memory://NAME[/PREFIX]                        a MemoryObjectStore shared by every opener of NAME
    file:///ABS/DIR                               a LocalObjectStore rooted at /ABS/DIR (created)
    s3://BUCKET[/PREFIX][?endpoint_url=URL&region=REGION&list_order=server|sort]
                                                  an S3ObjectStore; credentials come only from the
                                                  standard AWS chain, never from the URL; list_order
                                                  as in S3ObjectStore (default: sort for non-AWS)

Invariants: a URL never carries credentials (``user:password@`` is refused, in the store URL and in its
``endpoint_url`` alike, so nothing secret can leak into logs through :func:`display_url`, error messages
or botocore's debug log); unknown query parameters are refused by name, so a typo (``endpoint=``) does
not silently fall back to AWS.
"""

from __future__ import annotations

import re
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from s3stream.base.clock import Clock
from s3stream.base.errors import InvalidRequest
from s3stream.base.ids import IdSource
from s3stream.objectstore.endpoint import display_url, validate_endpoint_url
from s3stream.objectstore.keys import validate_prefix
from s3stream.objectstore.protocol import ObjectStore

__all__ = ["StoreUrl", "display_url", "open_object_store", "parse_store_url", "validate_endpoint_url"]

_ALLOWED_PARAMS: dict[str, frozenset[str]] = {
    "memory": frozenset(),
    "file": frozenset(),
    "s3": frozenset({"endpoint_url", "region", "list_order"}),
}

_REGION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}")


@dataclass(frozen=True, slots=True)
class StoreUrl:
    """A parsed store URL.

    Attributes:
        scheme: ``memory``, ``file`` or ``s3``.
        bucket_or_path: the memory namespace name, the absolute directory, or the bucket.
        prefix: the key prefix inside it ('' for none), without leading/trailing ``/``.
        params: the query parameters (already checked against the scheme's allowed names).
    """

    scheme: str
    bucket_or_path: str
    prefix: str = ""
    params: dict[str, str] = field(default_factory=dict)


def parse_store_url(url: str) -> StoreUrl:
    """Parse and validate ``url``; raise :class:`InvalidRequest` (naming the problem) if it is wrong."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _ALLOWED_PARAMS:
        raise InvalidRequest(f"unsupported store URL scheme {parts.scheme!r} in {display_url(url)!r}; "
                             "use memory://, file:///ABS/DIR or s3://BUCKET/PREFIX")
    if "@" in parts.netloc:
        raise InvalidRequest("store URLs must not carry credentials; use the AWS credential chain "
                             f"(environment, profile, instance role): {display_url(url)!r}")
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(params) - _ALLOWED_PARAMS[scheme])
    if unknown:
        raise InvalidRequest(f"unknown query parameter(s) {', '.join(unknown)} in {display_url(url)!r}; "
                             f"allowed for {scheme}://: {sorted(_ALLOWED_PARAMS[scheme]) or 'none'}")
    if scheme == "file":
        return _parse_file(parts.netloc, unquote(parts.path), url)
    if params.get("endpoint_url"):
        validate_endpoint_url(params["endpoint_url"])
    name = parts.netloc
    if not name:
        what = "bucket" if scheme == "s3" else "namespace"
        raise InvalidRequest(f"store URL {display_url(url)!r} names no {what}")
    prefix = unquote(parts.path).strip("/")
    if prefix:
        try:
            validate_prefix(prefix)
        except InvalidRequest as exc:
            raise InvalidRequest(f"invalid prefix in store URL {display_url(url)!r}: {exc}") from exc
    return StoreUrl(scheme, name, prefix, params)


def _parse_file(netloc: str, path: str, url: str) -> StoreUrl:
    if netloc not in ("", "localhost") or not path.startswith("/") or not Path(path).is_absolute():
        raise InvalidRequest("file store URLs need an absolute path (file:///ABS/DIR), got "
                             f"{display_url(url)!r} (a relative path, or a host name)")
    return StoreUrl("file", path.rstrip("/") or "/", "", {})


def open_object_store(url: str, *, clock: Clock | None = None, ids: IdSource | None = None,
                      check_access: bool = False, io_executor: Executor | None = None) -> ObjectStore:
    """Open the ObjectStore ``url`` names (see the module docstring for the forms).

    ``check_access`` (for opening a store): an S3 store is listed once, failing fast
    (:meth:`~s3stream.objectstore.s3.S3ObjectStore.check_access`), so a wrong endpoint, bucket or
    secret is reported at open, in seconds. ``io_executor``: where a ``file://`` store's direct writes run
    (:class:`~s3stream.objectstore.local.LocalObjectStore`; None: the process-wide I/O threads).

    Raises:
        InvalidRequest: a malformed URL or endpoint_url, a relative file path or an unknown query parameter.
        StoreAccessError: the directory cannot be created, or S3 has no credentials for the endpoint
            (with ``check_access``: or the endpoint, bucket or credentials cannot be used).
    """
    parsed = parse_store_url(url)
    store: ObjectStore
    if parsed.scheme == "memory":
        from s3stream.objectstore.memory import MemoryObjectStore
        from s3stream.objectstore.prefixed import PrefixedObjectStore

        store = MemoryObjectStore(parsed.bucket_or_path, clock=clock)
        return PrefixedObjectStore(store, parsed.prefix) if parsed.prefix else store
    if parsed.scheme == "file":
        from s3stream.objectstore.local import LocalObjectStore

        return LocalObjectStore(parsed.bucket_or_path, clock=clock, io_executor=io_executor)
    from s3stream.objectstore.s3 import S3ObjectStore  # imported lazily: boto3 is slow to import

    region = parsed.params.get("region") or None
    if region is not None and not _REGION_RE.fullmatch(region):
        raise InvalidRequest(f"region {region!r} is not a valid region name (letters, digits and '-')")
    order = parsed.params.get("list_order") or None
    if order not in (None, "server", "sort"):
        raise InvalidRequest(f"list_order must be 'server' or 'sort', not {order!r}")
    s3 = S3ObjectStore(parsed.bucket_or_path, prefix=parsed.prefix,
                       endpoint_url=parsed.params.get("endpoint_url") or None,
                       region=region, clock=clock, ids=ids,
                       list_order="sort" if order == "sort" else "server" if order else None)
    if check_access:
        try:
            s3.check_access()
        except BaseException:
            s3.close()
            raise
    return s3
