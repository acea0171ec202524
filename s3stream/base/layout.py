"""Every object key s3stream writes, in one place (the bucket layout is part of the format).

::

    {root}/topics/{name}/meta/{seq:020d}.json                 topic document versions (put-if-absent)
    {root}/logs/{topic_id}/{partition}/manifest/{seq:020d}.json   partition manifests (put-if-absent)
    {root}/logs/{topic_id}/{partition}/segments/{base:020d}-{ulid}.parquet   sealed segments (unique)
    {root}/logs/{topic_id}/{partition}/gc/manifest.boundary    manifest GC boundary (If-Match)
    {root}/wal/{node_id}/{seq:020d}.wal                        WAL objects; the key is the commit point
    {root}/producer_ids/{seq:020d}.json                        producer id blocks (put-if-absent counter)
    {root}/_probe/{token}/...                                  capability probe scratch keys
    {root}/_spark/jobs/{job_id}/heartbeat                      a distributed job's liveness (re-PUT while it runs)
    {root}/_spark/jobs/{job_id}/maps/{topic_id}-{partition}.arrow   a compaction job's offset maps (scratch)

``{root}`` is the store's prefix (empty for a bucket root); keys below are relative to the root and
the store wraps its ObjectStore with the prefix. 20-digit zero padding sorts lexicographically, but
readers parse and sort numbers themselves.
"""

from __future__ import annotations

import re

from s3stream.base.topic_config import validate_topic_name

__all__ = [
    "JOBS_PREFIX",
    "JOB_ABANDONED_AFTER_MS",
    "JOB_HEARTBEAT_INTERVAL_MS",
    "PRODUCER_IDS_PREFIX",
    "is_segment_key",
    "job_heartbeat_key",
    "job_map_key",
    "job_prefix",
    "log_prefix",
    "manifest_key",
    "parse_job_key",
    "parse_seq",
    "parse_wal_key",
    "producer_ids_key",
    "segment_key",
    "segment_prefix",
    "topic_meta_key",
    "topic_meta_prefix",
    "wal_key",
    "wal_prefix",
]

_SEQ_RE = re.compile(r"(\d{20})\.(?:json|wal)$")


def topic_meta_prefix(name: str) -> str:
    """Where topic ``name``'s documents live; InvalidTopic unless ``name`` follows Kafka's rules, so no name
    (a path, ``..``, anything outside ``[a-zA-Z0-9._-]``, over 249 characters) ever becomes part of a key."""
    return f"topics/{validate_topic_name(name)}/meta/"


def topic_meta_key(name: str, seq: int) -> str:
    return f"{topic_meta_prefix(name)}{seq:020d}.json"


def log_prefix(topic_id: str, partition: int) -> str:
    return f"logs/{topic_id}/{partition}/"


def manifest_key(topic_id: str, partition: int, seq: int) -> str:
    return f"{log_prefix(topic_id, partition)}manifest/{seq:020d}.json"


def segment_prefix(topic_id: str, partition: int) -> str:
    return f"{log_prefix(topic_id, partition)}segments/"


def segment_key(topic_id: str, partition: int, base_offset: int, ulid: str) -> str:
    return f"{segment_prefix(topic_id, partition)}{base_offset:020d}-{ulid.lower()}.parquet"


_SEGMENT_NAME_RE = re.compile(r"\d{20}-[0-9a-z]+\.parquet", re.ASCII)


def is_segment_key(key: str, topic_id: str, partition: int) -> bool:
    """Whether ``key`` has the shape :func:`segment_key` gives this partition's segments (nothing else: no
    other partition's key, no ``..``, no deeper path)."""
    prefix = segment_prefix(topic_id, partition)
    return key.startswith(prefix) and _SEGMENT_NAME_RE.fullmatch(key, len(prefix)) is not None


def wal_prefix(node_id: str) -> str:
    return f"wal/{node_id}/"


def wal_key(node_id: str, seq: int) -> str:
    return f"{wal_prefix(node_id)}{seq:020d}.wal"


#: the idempotent producers' id counter (:mod:`s3stream.manifest.producer_ids`)
PRODUCER_IDS_PREFIX = "producer_ids/"


def producer_ids_key(seq: int) -> str:
    return f"{PRODUCER_IDS_PREFIX}{seq:020d}.json"


def parse_seq(key: str) -> int | None:
    """The sequence number of a manifest, topic-meta or WAL object key; None for other keys."""
    m = _SEQ_RE.search(key)
    return int(m.group(1)) if m else None


def parse_wal_key(key: str) -> tuple[str, int] | None:
    """``(node_id, seq)`` of a WAL object key."""
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != "wal":
        return None
    seq = parse_seq(parts[2])
    return None if seq is None else (parts[1], seq)


#: Where distributed jobs (``s3stream.apps.spark``) keep scratch objects, one directory per job.
JOBS_PREFIX = "_spark/jobs/"
#: A running job re-PUTs its heartbeat this often, so its directory always has a recent object.
JOB_HEARTBEAT_INTERVAL_MS = 60_000
#: GC deletes a job directory only once no object in it is newer than this (and ``orphan_min_age_ms``):
#: ten missed heartbeats mean the job is gone (a crashed driver never deletes its scratch objects).
JOB_ABANDONED_AFTER_MS = 10 * JOB_HEARTBEAT_INTERVAL_MS


def job_prefix(job_id: str) -> str:
    return f"{JOBS_PREFIX}{job_id}/"


def job_heartbeat_key(job_id: str) -> str:
    return f"{job_prefix(job_id)}heartbeat"


def job_map_key(job_id: str, topic_id: str, partition: int) -> str:
    return f"{job_prefix(job_id)}maps/{topic_id}-{partition}.arrow"


#: the keys a job writes under its directory: :func:`job_heartbeat_key`, :func:`job_map_key`
_JOB_KEY_RE = re.compile(r"([^/]+)/(?:heartbeat|maps/[0-9a-z]+-(?:0|[1-9]\d*)\.arrow)", re.ASCII)


def parse_job_key(key: str) -> str | None:
    """The job id of a key a job writes (:func:`job_heartbeat_key`, :func:`job_map_key`); None for any other
    key, under :data:`JOBS_PREFIX` or not (another store nested in the jobs directory keeps its keys)."""
    if not key.startswith(JOBS_PREFIX):
        return None
    m = _JOB_KEY_RE.fullmatch(key, len(JOBS_PREFIX))
    return m.group(1) if m else None
