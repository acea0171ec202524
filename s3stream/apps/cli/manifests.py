"""``s3stream manifest show TOPIC PARTITION [--seq N]``: a partition manifest as pretty JSON.

The manifest is read from the bucket exactly as stored (the latest version, or version ``--seq``),
validated by the strict decoder (so a damaged manifest is reported as corrupt data, not printed), and
re-indented for humans: keys sorted, two spaces. Before a partition's first commit there is no
manifest; the empty one (``seq`` 0) is printed and stderr says so.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from s3stream.apps.cli.common import OptionsOpt, UrlOpt, err_console, open_cli_store
from s3stream.base.errors import InvalidRequest, ObjectNotFound, UnknownTopic
from s3stream.manifest.codec import ManifestDocCodec, encode_manifest
from s3stream.manifest.model import Manifest

if TYPE_CHECKING:
    from s3stream.store import Store

__all__ = ["app"]

app = typer.Typer(help="Inspect partition manifests.", no_args_is_help=True, add_completion=False)


def _manifest_bytes(store: Store, topic: str, partition: int, seq: int | None) -> tuple[bytes, str | None]:
    """The stored bytes of the wanted version and its key (None for the empty manifest), validated."""
    count = store.partitions(topic)
    if partition >= count:
        raise UnknownTopic(f"topic {topic!r} has no partition {partition} (it has {count})")
    log = store.partition(topic, partition)
    mstore = log.manifest_store
    if seq is None:
        latest = mstore.load_latest()
        if latest is None:
            return encode_manifest(Manifest.empty(topic, log.topic_id, partition)), None
        seq = latest.seq
    key = mstore.key_for_seq(seq)
    try:
        data = store.object_store.get(key)
    except ObjectNotFound:
        latest_seq = max(mstore.list_seqs(), default=0)
        raise InvalidRequest(f"partition {partition} of {topic!r} has no manifest version {seq} (latest "
                             f"listed: {latest_seq}; older versions may have been garbage-collected)") from None
    ManifestDocCodec(log.topic_id, partition).decode(data, source=key)  # validate before showing
    return data, key


@app.command("show")
def show(
    topic: Annotated[str, typer.Argument(help="Topic name.")],
    partition: Annotated[int, typer.Argument(min=0, help="Partition number.")],
    seq: Annotated[int | None, typer.Option("--seq", min=1, help="This version instead of the latest.")] = None,
    url: UrlOpt = None,
    option: OptionsOpt = None,
) -> None:
    """Print the latest (or a given) manifest version of one partition as pretty JSON."""
    with open_cli_store(url, option) as store:
        data, key = _manifest_bytes(store, topic, partition, seq)
    if key is None:
        err_console().print(f"[dim]partition {partition} of {topic!r} has no manifest yet (showing the empty one)[/]")
    else:
        err_console().print(f"[dim]{key}[/]")
    typer.echo(json.dumps(json.loads(data), indent=2, sort_keys=True, ensure_ascii=False))
