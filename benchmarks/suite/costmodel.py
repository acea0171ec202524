"""What a month of this workload would cost on S3 Standard, for s3stream and for the naive baseline.

Pure functions of the measured requests per GiB (no I/O), so a result file can be re-priced with other
prices. The model, per ingest rate ``R`` (MB/s of record payload) held for a 30-day month:

* **PUT**: ``GiB ingested per month x PUT/GiB x PUT price``. PUT/GiB is the ingest workload's
  (its ``ack=wal`` run's PUTs per GiB of payload, every PUT counted: WAL objects, segments, manifests and
  the few one-time ones, which a short run overweights). WAL objects are cut by size above
  ``flush.bytes / flush.interval.ms`` and by time below it, so at another rate their share is rescaled:
  ``PUT/GiB(R) = measured - wal(measured rate) + wal(R)``, ``wal(R) = max(GiB / flush.bytes,
  flushes per second / GiB per second)``;
* **GET**: write-path GETs per GiB (ingest) plus ``consumers x`` read GETs per GiB, taken from the
  catch-up workload (a consumer reading everything once, from sealed segments) when it ran;
* **other requests**: HEAD at the GET price, LIST at the PUT price, DELETE free (S3 bills LIST with PUT
  and HEAD with GET; DELETE and CANCEL are free);
* **storage**: the steady state of ``retention_days`` of data: ``R x retention`` bytes, billed per
  GB-month (a GB taken as 2^30 bytes), times ``stored_per_payload`` (1.0: records here do not compress).

The naive baseline (one object per produced batch, see ``benchmarks/suite/naive.py``) pays its own
measured PUT/GiB (ingest); its read GETs are the catch-up workload's naive GET/GiB when it ran, otherwise
one GET per object it wrote (that is how it is read back; its LIST per 1,000 objects is left out).
Its PUT/GiB does not depend on the rate (one object per append). Its storage is the same bytes.

Prices: S3 Standard, US East (N. Virginia), from https://aws.amazon.com/s3/pricing/ (Storage & requests
tab), read 2026-11-22: PUT, COPY, POST, LIST $0.005 per 1,000 requests; GET, SELECT and all other
requests $0.0004 per 1,000; DELETE and CANCEL free; storage $0.023 per GB-month for the first 50 TB.
Request prices are per 1,000 requests, so ``--price put=0.005`` overrides them in the unit the page uses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "DEFAULT_REFERENCE_MB_PER_S",
    "PRICE_SOURCE",
    "S3_STANDARD",
    "CostBreakdown",
    "Scenario",
    "monthly_cost",
    "parse_price",
    "price_table",
    "requests_per_gib",
    "suite_costs",
    "wal_objects_per_gib",
]

GiB = 1 << 30
MB = 1_000_000
MONTH_S = 30 * 86_400          # a 30-day month
DAY_S = 86_400
DEFAULT_REFERENCE_MB_PER_S = 10.0
DEFAULT_RETENTION_DAYS = 7.0
DEFAULT_CONSUMERS = 1

# USD; request prices per 1,000 requests, storage per GB-month.
S3_STANDARD: dict[str, float] = {
    "put": 0.005, "get": 0.0004, "head": 0.0004, "list": 0.005, "delete": 0.0, "storage": 0.023,
}
PRICE_SOURCE = {
    "url": "https://aws.amazon.com/s3/pricing/",
    "region": "US East (N. Virginia), us-east-1",
    "storage_class": "S3 Standard (first 50 TB / month)",
    "read_on": "2026-11-22",
    "units": "request prices in USD per 1,000 requests; storage in USD per GB-month (GB = 2^30 bytes)",
}


def price_table(overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """S3 Standard prices with ``overrides`` applied; an unknown name or a negative price raises."""
    prices = dict(S3_STANDARD)
    for name, value in (overrides or {}).items():
        if name not in prices:
            raise ValueError(f"unknown price {name!r}; known: {', '.join(sorted(prices))}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"price {name}={value} must be a finite number >= 0")
        prices[name] = float(value)
    return prices


def parse_price(item: str) -> tuple[str, float]:
    """``"put=0.005"`` -> ``("put", 0.005)`` (the ``--price`` option)."""
    name, sep, value = item.partition("=")
    name = name.strip().lower()
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not sep or not name or not math.isfinite(number):
        raise ValueError(f"price {item!r} is not NAME=NUMBER (names: {', '.join(sorted(S3_STANDARD))})")
    price_table({name: number})
    return name, number


def requests_per_gib(requests: Mapping[str, int], payload_bytes: int) -> dict[str, float]:
    """Requests per GiB of payload by kind (lower-case kinds); empty when nothing was ingested."""
    if payload_bytes <= 0:
        return {}
    gib = payload_bytes / GiB
    return {kind.lower(): count / gib for kind, count in requests.items()}


def wal_objects_per_gib(mb_per_s: float, flush_bytes: int, flush_interval_ms: int) -> float:
    """WAL objects per GiB at ``mb_per_s``: one per ``flush_bytes``, or one per interval when slower."""
    by_size = GiB / flush_bytes
    if mb_per_s <= 0 or flush_interval_ms <= 0:
        return by_size
    by_time = (1000.0 / flush_interval_ms) / (mb_per_s * MB / GiB)
    return max(by_size, by_time)


@dataclass(frozen=True, slots=True)
class CostBreakdown:
    """USD per month by component."""

    put: float
    get: float
    other_requests: float
    storage: float

    @property
    def requests(self) -> float:
        return self.put + self.get + self.other_requests

    @property
    def total(self) -> float:
        return self.requests + self.storage

    def as_dict(self) -> dict[str, float]:
        return {**asdict(self), "requests": self.requests, "total": self.total}


def monthly_cost(*, mb_per_s: float, write_per_gib: Mapping[str, float], read_get_per_gib: float,
                 prices: Mapping[str, float], retention_days: float = DEFAULT_RETENTION_DAYS,
                 consumers: int = DEFAULT_CONSUMERS, stored_per_payload: float = 1.0) -> CostBreakdown:
    """The monthly bill of ingesting ``mb_per_s`` with ``write_per_gib`` requests and ``consumers`` readers.

    ``write_per_gib``: requests per GiB by lower-case kind on the write path (``put``, ``get``, ``head``,
    ``list``, ``delete``); ``read_get_per_gib``: GETs one consumer makes per GiB it reads.
    """
    gib_per_month = mb_per_s * MB * MONTH_S / GiB

    def cost(kind: str, per_gib: float) -> float:
        return gib_per_month * per_gib * prices[kind] / 1000.0

    put = cost("put", write_per_gib.get("put", 0.0))
    get = cost("get", write_per_gib.get("get", 0.0) + consumers * read_get_per_gib)
    other = (cost("head", write_per_gib.get("head", 0.0)) + cost("list", write_per_gib.get("list", 0.0))
             + cost("delete", write_per_gib.get("delete", 0.0)))
    stored_gib = mb_per_s * MB * retention_days * DAY_S / GiB * stored_per_payload
    return CostBreakdown(put=put, get=get, other_requests=other, storage=stored_gib * prices["storage"])


@dataclass(frozen=True, slots=True)
class Scenario:
    """One priced situation: an ingest rate, a retention, a read fan-out."""

    name: str
    mb_per_s: float
    retention_days: float = DEFAULT_RETENTION_DAYS
    consumers: int = DEFAULT_CONSUMERS


def _figure(workloads: Mapping[str, Mapping[str, Any]], workload: str, name: str, *,
            baseline: bool = False) -> float | None:
    section = workloads.get(workload, {}).get("baseline" if baseline else "figures", {})
    value = section.get(name)
    return float(value) if value is not None else None


def _put_per_gib_at(put: float, mb_per_s: float, measured: float | None, flush_bytes: int | None,
                    flush_interval_ms: int | None) -> float:
    """PUT/GiB measured at ``measured`` MB/s, with its WAL-object share moved to ``mb_per_s``."""
    if not measured or measured <= 0 or not flush_bytes or not flush_interval_ms:
        return put
    wal = wal_objects_per_gib(mb_per_s, flush_bytes, flush_interval_ms)
    return max(put - wal_objects_per_gib(measured, flush_bytes, flush_interval_ms) + wal, wal)


def suite_costs(workloads: Mapping[str, Mapping[str, Any]], *, prices: Mapping[str, float] | None = None,
                reference_mb_per_s: float = DEFAULT_REFERENCE_MB_PER_S,
                retention_days: float = DEFAULT_RETENTION_DAYS, consumers: int = DEFAULT_CONSUMERS,
                flush_bytes: int | None = None, flush_interval_ms: int | None = None) -> dict[str, Any]:
    """The cost section of a suite result, from the workloads' result dicts (``WorkloadResult.as_dict``).

    Needs the ingest workload (requests + payload, or its ``put_per_gib`` figure); without it the
    section only says why it is empty. Scenarios: the measured ``ack_wal_mb_per_s`` and a fixed
    ``reference_mb_per_s``. With ``flush_bytes`` and ``flush_interval_ms`` (the run's), WAL-object PUTs
    are rescaled to each scenario's rate (see the module docstring).
    """
    table = price_table(prices)
    out: dict[str, Any] = {"prices": table, "price_source": PRICE_SOURCE, "scenarios": [], "notes": []}
    ingest = workloads.get("ingest")
    if ingest is None:
        out["notes"].append("no ingest workload in this run: nothing to price")
        return out
    write = requests_per_gib(ingest.get("requests", {}), int(ingest.get("payload_bytes", 0)))
    if not write:
        write = {k: v for k, v in (("put", _figure(workloads, "ingest", "put_per_gib")),
                                   ("get", _figure(workloads, "ingest", "get_per_gib"))) if v is not None}
        out["notes"].append("ingest reported no request counts; priced from its put_per_gib/get_per_gib figures")
    read = _figure(workloads, "catchup", "catchup_get_per_gib")
    if read is None:
        read = 0.0
        out["notes"].append("no catchup workload: consumer reads are not priced (GET/GiB taken as 0)")
    naive_put = _figure(workloads, "ingest", "naive_put_per_gib", baseline=True)
    naive_get = _figure(workloads, "catchup", "naive_catchup_get_per_gib", baseline=True)
    if naive_put is not None and naive_get is None:
        naive_get = naive_put
        out["notes"].append("naive reads priced at one GET per object it wrote (its PUT/GiB)")
    per_gib: dict[str, Any] = {"s3stream_write": write, "s3stream_read_get": read}
    if naive_put is not None and naive_get is not None:
        per_gib |= {"naive_write_put": naive_put, "naive_read_get": naive_get}
    out["requests_per_gib"] = per_gib
    scenarios = [Scenario("reference rate", reference_mb_per_s, retention_days, consumers)]
    measured = _figure(workloads, "ingest", "ack_wal_mb_per_s")
    if measured is not None and measured > 0:
        scenarios.insert(0, Scenario("measured ack=wal rate", measured, retention_days, consumers))
    if flush_bytes and flush_interval_ms and measured:
        out["notes"].append("s3stream PUT/GiB rescaled to each scenario's rate: WAL objects are cut by time below "
                            "flush.bytes / flush.interval.ms")
    for sc in scenarios:
        at_rate = dict(write)
        at_rate["put"] = _put_per_gib_at(write.get("put", 0.0), sc.mb_per_s, measured, flush_bytes, flush_interval_ms)
        ours = monthly_cost(mb_per_s=sc.mb_per_s, write_per_gib=at_rate, read_get_per_gib=read, prices=table,
                            retention_days=sc.retention_days, consumers=sc.consumers)
        row: dict[str, Any] = {**asdict(sc), "s3stream_put_per_gib": at_rate.get("put", 0.0),
                               "s3stream": ours.as_dict()}
        if naive_put is not None and naive_get is not None:
            naive = monthly_cost(mb_per_s=sc.mb_per_s, write_per_gib={"put": naive_put},
                                 read_get_per_gib=naive_get, prices=table, retention_days=sc.retention_days,
                                 consumers=sc.consumers)
            row["naive"] = naive.as_dict()
            if ours.total > 0:
                row["naive_over_s3stream_total"] = naive.total / ours.total
            if ours.requests > 0:
                row["naive_over_s3stream_requests"] = naive.requests / ours.requests
        out["scenarios"].append(row)
    return out
