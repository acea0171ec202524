"""Kafka: what the Kafka-compatible server costs over the Python API, on the same store (issue 26).

Run ``python -m benchmarks kafka [--target file|seaweedfs|...] [--quick]``. Results go to
``benchmarks/results/kafka-<target>[-quick].json`` and ``.md``.

One store on the target (one root, one WAL directory; reopened between phases as a restarted process would),
a :class:`~s3stream.apps.kafka.server.KafkaServerThread` over it on an ephemeral port in this process, the
Kafka clients in a child process of their own (:mod:`benchmarks.kafka_process`: the server does not share
its GIL with them, as in a deployment), the Python API path in this process (as an application uses it).
Records are keyless with 1 KiB values (:mod:`benchmarks.kafka_data`), round-robin over the partitions.
Phases:

1. **Produce**: an untimed warm-up first produces a quarter of ``--mib`` through Kafka into a topic of its own
   (the process's heaps grow to what requests in flight need once, before either timed path, as in a server that has
   been running). Then confluent-kafka produces ``--mib`` into one topic (acks=all, ``linger.ms``, 1 MB batches, no
   compression: :func:`~benchmarks.kafka_clients.producer_config`) and waits for every acknowledgement; then the
   Python API appends the same records to a second topic with ``append_arrow_async`` from ``--api-threads`` threads,
   in batches of the records the Kafka producer really put in a batch (its own statistics;
   or ``--api-batch-records``), with the ack mode the server gives acks=all. Both topics are then flushed and every
   partition rolled, so all of it is in sealed segments.
2. **Catch-up**: the store and a new server are opened again (empty caches) and a consumer (``assign`` from 0)
   reads the whole Kafka topic (cold), then a second consumer reads it again (warm); then the store is opened
   again and ``read_arrow`` reads the same topic partition by partition (cold, then warm), and the Python API's
   topic once (its verification).
3. **End to end at half load**: on that store and a new server, records are produced at half the Kafka
   produce rate of phase 1 for ``--e2e-seconds`` with a consumer tailing, the send time in each value; then the
   Python API path at the same rate, with the same per-partition batching (``linger.ms``, ``batch.size``) and a
   reader thread polling ``read_arrow`` at the log end. Then the same at light load (1/8 of that rate, for half
   as long), reported beside the judged figure: what the Kafka path adds when requests do not queue.

Every read checks each partition's record count and a CRC32C chained over its values in offset order against
what was written; anything wrong is a problem of the result.

Judged figures (issue 26): Kafka produce MB/s >= 0.7 x the Python API's; Kafka catch-up MB/s (cold) >= 0.7 x
``read_arrow``'s (cold); added end-to-end p99 (Kafka path - Python API path) <= 10 ms.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

import s3stream
from benchmarks.core.markdown import Markdown, fmt, render_result
from benchmarks.core.measure import machine_info, mb_per_s
from benchmarks.core.result import Figure, Run, write_result
from benchmarks.core.scratch import run_in_scratch
from benchmarks.core.targets import Target, open_target, target_slug
from benchmarks.kafka_api import e2e_api, ingest, read_pass
from benchmarks.kafka_clients import (
    KafkaBenchError,
    consume_all,
    consumer_config,
    e2e_kafka,
    produce_all,
    producer_config,
    public_config,
)
from benchmarks.kafka_data import Checksums, CpuMeter, ServerMeter, Values, expected_checksums
from benchmarks.kafka_process import ClientProcess
from s3stream.apps.kafka.config import BrokerConfig
from s3stream.apps.kafka.server import KafkaServerThread
from s3stream.base.allocator import tune_allocator
from s3stream.base.errors import S3StreamError

__all__ = ["KafkaBenchConfig", "bounds", "make_config", "measure", "render_markdown", "run", "run_standalone"]

MiB = 1 << 20
STORE = "kafka-bench"
TOPIC_KAFKA, TOPIC_API = "produced-by-kafka", "produced-by-api"
TOPIC_WARM_UP = "warm-up"
WARM_UP_FRACTION = 4  # the untimed warm-up produces 1/4 of --mib
E2E_KAFKA, E2E_API = "e2e-kafka", "e2e-api"
LIGHT_LOAD_FRACTION = 8  # the reported (not judged) light-load end to end runs at 1/8 of the produce rate
PRODUCE_TARGET = 0.7
CATCHUP_TARGET = 0.7
ADDED_P99_BOUND_MS = 10.0
TICK_S = 0.001
TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class KafkaBenchConfig:
    """One run's shape: MiB per produce path, the clients' batching, the Python API's threads and window."""

    mib: int = 512
    partitions: int = 4
    record_bytes: int = 1024
    linger_ms: int = 10
    batch_bytes: int = 1_000_000
    api_threads: int = 4
    api_batch_records: int = 0  # 0: the Kafka producer's measured mean batch
    api_inflight_mib: int = 32
    e2e_seconds: float = 30.0
    read_bytes: int = 8 * MiB
    quick: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    broker_options: dict[str, Any] = field(default_factory=dict)

    @property
    def counts(self) -> list[int]:
        """Records per partition (each path writes this many)."""
        per = math.ceil(self.mib * MiB / self.record_bytes / self.partitions)
        return [per] * self.partitions


def make_config(*, quick: bool = False, mib: int | None = None, partitions: int = 4, record_bytes: int = 1024,
                linger_ms: int = 10, api_threads: int = 4, api_batch_records: int = 0, api_inflight_mib: int = 32,
                e2e_seconds: float | None = None, options: dict[str, Any] | None = None,
                broker_options: dict[str, Any] | None = None) -> KafkaBenchConfig:
    """A run's shape from the command's options (512 MiB and 30 s of end to end; 24 MiB and 3 s with quick)."""
    cfg = KafkaBenchConfig(mib=mib or (24 if quick else 512), partitions=partitions, record_bytes=record_bytes,
                           linger_ms=linger_ms, api_threads=api_threads, api_batch_records=api_batch_records,
                           api_inflight_mib=api_inflight_mib,
                           e2e_seconds=e2e_seconds if e2e_seconds is not None else (3.0 if quick else 30.0),
                           quick=quick, options=dict(options or {}), broker_options=dict(broker_options or {}))
    if cfg.partitions < 1 or cfg.mib < 1 or cfg.api_threads < 1 or cfg.linger_ms < 0 or cfg.api_inflight_mib < 1:
        raise ValueError("need --partitions, --mib, --api-threads and --api-inflight-mib >= 1, --linger-ms >= 0")
    if cfg.record_bytes < 16 or cfg.e2e_seconds <= 0 or cfg.api_batch_records < 0:
        raise ValueError("need --record-bytes >= 16, --e2e-seconds > 0 and --api-batch-records >= 0")
    BrokerConfig(port=0).with_options(cfg.broker_options)  # an unknown server option is a usage error
    return cfg


# -- the store and the server ---------------------------------------------------------------------------------


def _open(target: Target, cfg: KafkaBenchConfig) -> s3stream.Store:
    """The run's store (a fresh ObjectStore on the same root and WAL directory each time: a restart)."""
    url, objstore = target.store(STORE)
    return s3stream.open_store(url, object_store=objstore, wal_dir=target.wal_dir(STORE),
                               **{**cfg.options, "probe": False})


def _serve(store: s3stream.Store, cfg: KafkaBenchConfig) -> KafkaServerThread:
    server = KafkaServerThread(store, BrokerConfig(port=0).with_options(cfg.broker_options))
    server.start()
    return server


def _seal(store: s3stream.Store, topic: str, partitions: int) -> None:
    """Everything of ``topic`` into sealed segments (not timed): what a catch-up reads cold."""
    store.flush()
    for p in range(partitions):
        store.partition(topic, p).roll()


def _logs(store: s3stream.Store, topic: str, partitions: int) -> list[s3stream.PartitionLog]:
    return [store.partition(topic, p) for p in range(partitions)]


def _say(label: str) -> None:
    print(f"phase: {label}", flush=True)


# -- the phases ---------------------------------------------------------------------------------------------


def _produce(target: Target, cfg: KafkaBenchConfig, values: Values, clients: ClientProcess
             ) -> tuple[dict[str, Any], str]:
    """Phase 1; the measurements and the ack mode the server gives acks=all."""
    counts, partitions = cfg.counts, cfg.partitions
    store = _open(target, cfg)
    try:
        store.create_topic(TOPIC_KAFKA, partitions=partitions)
        store.create_topic(TOPIC_API, partitions=partitions)
        server = _serve(store, cfg)
        try:
            ack = server.server.config.acks_all
            warm_up = _warm_up(store, server, cfg, values, clients)
            _say(f"Kafka produce: {cfg.mib} MiB, {partitions} partitions, acks=all")
            meter, seen = CpuMeter(), ServerMeter(server.server.broker.metrics)
            kafka = clients.call(produce_all, server.bootstrap, TOPIC_KAFKA, values, counts,
                                 linger_ms=cfg.linger_ms, batch_bytes=cfg.batch_bytes, timeout_s=TIMEOUT_S)
            kafka["cpu"], kafka["server"] = meter.stop(), seen.stop()
            kafka["warm_up"], kafka["problems"] = warm_up, warm_up.pop("problems") + kafka["problems"]
        finally:
            server.stop()
        kafka["problems"] += [f"Kafka produce: partition {p} ends at {plog.log_end_offset}, {counts[p]} produced"
                              for p, plog in enumerate(_logs(store, TOPIC_KAFKA, partitions))
                              if plog.log_end_offset != counts[p]]
        _seal(store, TOPIC_KAFKA, partitions)
        measured = kafka["producer"]["batch_records_mean"]
        batch = cfg.api_batch_records or max(1, round(measured or cfg.batch_bytes / cfg.record_bytes))
        window = max(1, cfg.api_inflight_mib * MiB // (batch * cfg.record_bytes) // cfg.api_threads)
        _say(f"Python API ingest: {cfg.mib} MiB, {cfg.api_threads} threads, {batch}-record batches, ack={ack}")
        meter = CpuMeter()
        api = ingest(_logs(store, TOPIC_API, partitions), values, counts, threads=cfg.api_threads,
                     batch_records=batch, window=window, ack=ack)
        api["cpu"] = meter.stop()
        api["batch_records_from"] = "argument" if cfg.api_batch_records else (
            "the Kafka producer's mean batch" if measured else "batch.size / record bytes")
        _seal(store, TOPIC_API, partitions)
    finally:
        store.close()
    return {"kafka": kafka, "api": api}, ack


def _warm_up(store: s3stream.Store, server: KafkaServerThread, cfg: KafkaBenchConfig, values: Values,
             clients: ClientProcess) -> dict[str, Any]:
    """Produce a quarter of ``--mib`` through Kafka into a topic of its own, untimed, and flush it: the process's
    heaps grow to what requests in flight need once, before either timed path (both run in this process), as
    in a server that has been running; a first pass would otherwise pay that growth in page faults alone."""
    counts = [max(1, c // WARM_UP_FRACTION) for c in cfg.counts]
    _say(f"warm-up (untimed): {sum(counts) * cfg.record_bytes / MiB:.0f} MiB through Kafka")
    store.create_topic(TOPIC_WARM_UP, partitions=cfg.partitions)
    raw = clients.call(produce_all, server.bootstrap, TOPIC_WARM_UP, values, counts, linger_ms=cfg.linger_ms,
                       batch_bytes=cfg.batch_bytes, timeout_s=TIMEOUT_S)
    store.flush()
    return {"records": sum(counts), "mb_per_s": raw["mb_per_s"], "problems": raw["problems"]}


def _read_result(raw: dict[str, Any], expected: Checksums, what: str, meter: CpuMeter,
                 server: ServerMeter | None = None) -> dict[str, Any]:
    seen: Checksums = raw["seen"]
    seconds = raw["seconds"]
    problems = raw["problems"] + seen.compare(what, expected)
    out = {"records": seen.total, "payload_bytes": seen.nbytes, "seconds": round(seconds, 3),
           "mb_per_s": round(mb_per_s(seen.nbytes, seconds), 3), "records_per_s": round(seen.total / seconds, 1),
           "cpu": meter.stop(), "verified": not problems, "problems": problems}
    if server is not None:
        out["server"] = server.stop()
    if "client_cpu" in raw:
        out["client_cpu"] = raw["client_cpu"]
    return out


def _catchup(target: Target, cfg: KafkaBenchConfig, expected: Checksums, clients: ClientProcess) -> dict[str, Any]:
    """Phase 2: the consumer through a restarted server, then ``read_arrow`` from a reopened store."""
    out: dict[str, Any] = {}
    total, partitions = expected.total, cfg.partitions
    store = _open(target, cfg)
    try:
        server = _serve(store, cfg)
        try:
            for name, label in (("kafka_cold", "cold"), ("kafka_warm", "warm")):
                _say(f"Kafka consumer catch-up ({label}): {total:,} records")
                meter, seen = CpuMeter(), ServerMeter(server.server.broker.metrics)
                raw = clients.call(consume_all, server.bootstrap, TOPIC_KAFKA, partitions, total,
                                   group=f"bench-catchup-{label}", idle_timeout_s=TIMEOUT_S)
                out[name] = _read_result(raw, expected, f"Kafka catch-up ({label})", meter, seen)
        finally:
            server.stop()
    finally:
        store.close()
    store = _open(target, cfg)
    try:
        for name, topic, label in (("read_arrow_cold", TOPIC_KAFKA, "cold"), ("read_arrow_warm", TOPIC_KAFKA, "warm"),
                                   ("read_arrow_api_topic", TOPIC_API, "the Python API's topic")):
            _say(f"read_arrow ({label}): {total:,} records")
            meter = CpuMeter()
            raw = read_pass(_logs(store, topic, partitions), read_bytes=cfg.read_bytes)
            out[name] = _read_result(raw, expected, f"read_arrow ({label})", meter)
    finally:
        store.close()
    return out


def _e2e(target: Target, cfg: KafkaBenchConfig, values: Values, ack: str, rate_mb: float, seconds: float,
         topics: tuple[str, str], clients: ClientProcess) -> dict[str, Any]:
    """Phase 3: both paths at ``rate_mb`` MB/s for ``seconds`` each, on ``topics`` (Kafka's, the API's)."""
    rate = rate_mb * 1e6 / cfg.record_bytes
    common: dict[str, Any] = {"rate_per_s": rate, "seconds": seconds, "linger_ms": cfg.linger_ms,
              "batch_bytes": cfg.batch_bytes, "tick_s": TICK_S, "timeout_s": TIMEOUT_S}
    kafka_topic, api_topic = topics
    store = _open(target, cfg)
    try:
        store.create_topic(kafka_topic, partitions=cfg.partitions)
        store.create_topic(api_topic, partitions=cfg.partitions)
        server = _serve(store, cfg)
        try:
            _say(f"Kafka end to end: {rate_mb:.1f} MB/s for {seconds:g} s")
            meter, seen = CpuMeter(), ServerMeter(server.server.broker.metrics)
            kafka = clients.call(e2e_kafka, server.bootstrap, kafka_topic, values, cfg.partitions, **common)
            kafka["cpu"], kafka["server"] = meter.stop(), seen.stop()
        finally:
            server.stop()
        _say(f"Python API end to end: {rate_mb:.1f} MB/s for {seconds:g} s")
        meter = CpuMeter()
        api = e2e_api(_logs(store, api_topic, cfg.partitions), values, ack=ack, read_bytes=cfg.read_bytes, **common)
        api["cpu"] = meter.stop()
    finally:
        store.close()
    return {"rate_mb_per_s": round(rate_mb, 3), "rate_records_per_s": round(rate, 1), "seconds": seconds,
            "kafka": kafka, "api": api}


def measure(target: Target, cfg: KafkaBenchConfig) -> dict[str, Any]:
    """Every phase on ``target``: the result document's body."""
    values = Values(cfg.record_bytes)
    with ClientProcess() as clients:
        produce, ack = _produce(target, cfg, values, clients)
        expected = expected_checksums(values, cfg.counts)
        catchup = _catchup(target, cfg, expected, clients)
        kafka_mb = produce["kafka"]["mb_per_s"]
        e2e = _e2e(target, cfg, values, ack, kafka_mb / 2, cfg.e2e_seconds, (E2E_KAFKA, E2E_API), clients)
        light = _e2e(target, cfg, values, ack, kafka_mb / LIGHT_LOAD_FRACTION, cfg.e2e_seconds / 2,
                     (E2E_KAFKA + "-light", E2E_API + "-light"), clients)
    config = BrokerConfig(port=0).with_options(cfg.broker_options)
    return {"produce": produce, "catchup": catchup, "e2e": e2e, "e2e_light": light,
            "server": {"acks_all": config.acks_all, "options": cfg.broker_options},
            "clients": {"producer": public_config(producer_config("", linger_ms=cfg.linger_ms,
                                                                  batch_bytes=cfg.batch_bytes)),
                        "consumer": public_config(consumer_config("", "bench"))}}


# -- the verdict ----------------------------------------------------------------------------------------------


def _problems(body: dict[str, Any]) -> list[str]:
    parts = [*body["produce"].values(), *body["catchup"].values(),
             *(body[phase][path] for phase in ("e2e", "e2e_light") if phase in body for path in ("kafka", "api"))]
    return [p for part in parts for p in part["problems"]]


def _figures(body: dict[str, Any]) -> list[Figure]:
    produce, catchup, e2e = body["produce"], body["catchup"], body["e2e"]
    kafka_p99, api_p99 = e2e["kafka"]["e2e"]["p99_ms"], e2e["api"]["e2e"]["p99_ms"]
    return [
        Figure.judge("kafka_produce_mb_per_s", "Kafka produce (confluent-kafka, acks=all)",
                     produce["kafka"]["mb_per_s"], "MB/s", produce["api"]["mb_per_s"],
                     f"Python API ingest (append_arrow_async, ack={produce['api']['ack']})", at_least=PRODUCE_TARGET,
                     details={"kafka_batch_records_mean": produce["kafka"]["producer"]["batch_records_mean"],
                              "api_batch_records": produce["api"]["batch_records"]}),
        Figure.judge("kafka_catchup_cold_mb_per_s", "Kafka consumer catch-up, cold server",
                     catchup["kafka_cold"]["mb_per_s"], "MB/s", catchup["read_arrow_cold"]["mb_per_s"],
                     "read_arrow of the same data, cold store", at_least=CATCHUP_TARGET,
                     details={"kafka_warm_mb_per_s": catchup["kafka_warm"]["mb_per_s"],
                              "read_arrow_warm_mb_per_s": catchup["read_arrow_warm"]["mb_per_s"]}),
        Figure.judge("kafka_added_e2e_p99_ms", "Added end-to-end p99 at half load (Kafka - Python API)",
                     kafka_p99 - api_p99, "ms", ADDED_P99_BOUND_MS, "issue 26 bound", at_most=1.0,
                     details={"kafka_p99_ms": kafka_p99, "api_p99_ms": api_p99, "rate_mb_per_s": e2e["rate_mb_per_s"],
                              **_light_details(body)}),
    ]


def _light_details(body: dict[str, Any]) -> dict[str, Any]:
    light = body.get("e2e_light")
    if light is None:
        return {}
    kafka_p99, api_p99 = light["kafka"]["e2e"]["p99_ms"], light["api"]["e2e"]["p99_ms"]
    return {"light_load_rate_mb_per_s": light["rate_mb_per_s"], "light_load_kafka_p99_ms": kafka_p99,
            "light_load_api_p99_ms": api_p99, "light_load_added_p99_ms": round(kafka_p99 - api_p99, 3)}


def bounds(body: dict[str, Any], cores: int) -> dict[str, Any]:
    """What this machine allows the Kafka path at best, from this run's own CPU measurements.

    A path needs its server's and its client's CPU seconds per MB together, out of ``cores`` cores: it cannot
    pass ``cores / (server + client CPU per MB)`` however well they overlap. A consumer's main thread (where
    confluent-kafka hands each message to Python) runs on one core: it cannot pass ``1 / (its CPU per MB)``
    even against a server that cost nothing. Each ceiling as a ratio is against the path's own reference."""
    produce, cold = body["produce"]["kafka"], body["catchup"]["kafka_cold"]

    def cpu_mb_per_s(part: dict[str, Any], seconds: float) -> float | None:
        return round(part["payload_bytes"] / 1e6 / seconds, 1) if seconds > 0 else None

    def ceiling(part: dict[str, Any], reference: float, main_thread: bool) -> dict[str, Any]:
        both = part["cpu"]["cpu_s"] + part["client_cpu"]["cpu_s"]
        by_cores = cpu_mb_per_s(part, both / cores)
        main = cpu_mb_per_s(part, part["client_cpu"]["by_role_s"].get("MainThread", 0.0)) if main_thread else None
        best = min(x for x in (by_cores, main) if x is not None) if by_cores is not None else None
        return {"cores": cores, "server_and_client_cpu_s": round(both, 3), "cores_ceiling_mb_per_s": by_cores,
                "client_main_thread_ceiling_mb_per_s": main, "ceiling_mb_per_s": best,
                "ceiling_ratio": round(best / reference, 3) if best is not None and reference > 0 else None}

    e2e = body["e2e"]["kafka"]
    produce_mb = produce["payload_bytes"] / 1e6
    e2e_mb = e2e["records"] * produce_mb / max(1, produce["records"])  # records of the same size
    wall = e2e["cpu"].get("wall_s") or e2e["seconds"]
    return {"produce": ceiling(produce, body["produce"]["api"]["mb_per_s"], main_thread=False),
            "catchup": ceiling(cold, body["catchup"]["read_arrow_cold"]["mb_per_s"], main_thread=True),
            "e2e": {"server_cpu_s": e2e["cpu"]["cpu_s"], "wall_s": wall,
                    "server_busy_cores": round(e2e["cpu"]["cpu_s"] / wall, 3) if wall else None,
                    "server_cpu_ms_per_mb": round(1e3 * e2e["cpu"]["cpu_s"] / e2e_mb, 3) if e2e_mb else None,
                    "produce_server_cpu_ms_per_mb": round(1e3 * produce["cpu"]["cpu_s"] / produce_mb, 3)}}


def run(spec: str, cfg: KafkaBenchConfig, work_dir: Path) -> dict[str, Any]:
    """Open the target, measure every phase, and return the result document."""
    tune_allocator(request_buffers=True)  # as ``s3stream serve`` runs its listener (both paths share it)
    doc = Run.start("kafka")
    with open_target(spec, work_dir) as target:
        body = measure(target, cfg)
        target_info = {"spec": spec, "slug": target.slug, **target.description}
        machine = machine_info(str(work_dir))
    body["bounds"] = bounds(body, int(machine.get("cores_usable") or machine.get("cores") or 1))
    slug = f"{target_slug(spec)}{'-quick' if cfg.quick else ''}"
    return doc.document(slug=slug, target=target_info, machine=machine, parameters=asdict(cfg), body=body,
                        figures=_figures(body), problems=_problems(body), notes=_notes(body))


def run_standalone(spec: str, cfg: KafkaBenchConfig, out_dir: Path, work_dir: Path | None = None) -> int:
    """Run, write ``out_dir/kafka-<target>[-quick].json`` and its ``.md``, print the summary; 1 if a target was
    missed or a check failed, 2 if the run could not complete (nothing written)."""
    try:
        result = run_in_scratch(lambda work: run(spec, cfg, work), prefix="s3stream-kafka-bench-", work_dir=work_dir,
                                write=lambda r: write_result(r, out_dir / f"kafka-{r['slug']}.json",
                                                             render_markdown(r)))
    except (KafkaBenchError, KafkaException, S3StreamError) as exc:
        print(f"kafka benchmark failed: {type(exc).__name__}: {exc}", flush=True)
        return 2
    return 0 if result["passed"] else 1


# -- reporting ------------------------------------------------------------------------------------------------


def _cpu(part: dict[str, Any], key: str = "cpu") -> str:
    cpu = part.get(key)
    if not cpu:
        return "-"
    roles = ", ".join(f"{role} {fmt(s)}" for role, s in (cpu.get("by_role_s") or {}).items())
    return f"{fmt(cpu.get('cpu_s'))} s ({roles or '-'})"


def _e2e_table(body: Markdown, e2e: dict[str, Any]) -> None:
    body.table(["path", "records", "MB/s", "e2e p50 ms", "e2e p99 ms", "e2e p99.9 ms", "e2e max ms", "ack p50 ms",
                "ack p99 ms", "process CPU", "client CPU", "verified"], [
        [label, fmt(r["records"]), fmt(r["mb_per_s"]), fmt(r["e2e"]["p50_ms"]), fmt(r["e2e"]["p99_ms"]),
         fmt(r["e2e"]["p999_ms"]), fmt(r["e2e"]["max_ms"]), fmt(r["ack"]["p50_ms"]), fmt(r["ack"]["p99_ms"]),
         _cpu(r), _cpu(r, "client_cpu"), "OK" if not r["problems"] else "FAILED"]
        for label, r in (("Kafka", e2e["kafka"]), ("Python API", e2e["api"]))])


def _server(part: dict[str, Any]) -> str:
    server = part.get("server") or {}
    apis = ", ".join(f"{api} {r['requests']:,} (mean {fmt(r['mean_ms'])} ms)"
                     for api, r in (server.get("requests") or {}).items())
    batches = ", ".join(f"{source} {n:,}" for source, n in (server.get("fetch_batches_by_source") or {}).items())
    return (apis or "-") + (f"; fetched batches: {batches}" if batches else "")


def _notes(body: dict[str, Any]) -> list[str]:
    kafka, warm = body["produce"]["kafka"]["producer"], body["produce"]["kafka"]["warm_up"]
    return [
        "MB = 10^6 bytes of record values (no keys, no headers). The Kafka clients run in a child process of "
        "their own (spawned once, before anything is timed), so the server and the store have the benchmark's "
        "process and its GIL to themselves, as in a deployment; the Python API path runs in the benchmark's "
        "process, as an application uses the library. Both processes share the machine's 2 cores. Process CPU "
        "is the benchmark's process (server and store, or the Python API path); client CPU is the child's.",
        f"The Kafka producer sent {kafka['produce_requests']:,} Produce requests, "
        f"{fmt(kafka['batch_records_mean'])} records ({fmt(kafka['batch_bytes_mean'])} bytes) per batch on average; "
        f"the broker round trip it saw (acks=all, {body['server']['acks_all']}): mean {fmt(kafka['rtt_mean_ms'])} ms, "
        f"p99 up to {fmt(kafka['rtt_p99_max_ms'])} ms (librdkafka's statistics, {kafka['intervals']} intervals of "
        "0.5 s; the p99 is the highest of the intervals).",
        "Cold: the store (and the server) were opened again after everything was flushed and sealed, so their "
        "caches were empty; the operating system's page cache was not dropped (on `file`, the objects' pages may "
        "be cached). The Kafka consumer reads before read_arrow, so any page cache favours read_arrow.",
        f"Before the timed Kafka produce, an untimed warm-up produced {fmt(warm['records'])} records through Kafka "
        f"into a topic of its own ({fmt(warm['mb_per_s'])} MB/s) "
        "and flushed them: both timed paths run in one process, and its heaps grow to what the requests in flight "
        "need once, as in a server that has been running (without it the first timed path pays that growth in "
        "page faults alone).",
        "End to end: latency = the time a consumed record reaches the application - its send time (stamped in "
        "its value), nearest-rank percentiles; both paths batch per partition the same way (linger.ms, batch.size), "
        "the Python API reader polls every partition in turn and sleeps 1 ms after a round that found nothing; the "
        "Kafka consumer waits for one message and takes what else is already there (no batch filling).",
    ]


def render_markdown(result: dict[str, Any]) -> str:
    """The summary of a Kafka benchmark result."""
    c = result["parameters"]
    produce, catchup, e2e = result["produce"], result["catchup"], result["e2e"]
    body = Markdown().heading("Produce").paragraph(
        f"{c['mib']} MiB of {c['record_bytes']}-byte records over {c['partitions']} partitions per path; the Kafka "
        f"producer lingers {c['linger_ms']} ms with batches up to {c['batch_bytes']:,} bytes.")
    k, a = produce["kafka"], produce["api"]
    body.table(["path", "records", "seconds", "MB/s", "records/s", "records per batch", "process CPU",
                "client CPU"], [
        ["Kafka (confluent-kafka, acks=all)", fmt(k["records"]), fmt(k["seconds"]), fmt(k["mb_per_s"]),
         fmt(k["records_per_s"]), fmt(k["producer"]["batch_records_mean"]), _cpu(k), _cpu(k, "client_cpu")],
        [f"Python API (append_arrow_async, ack={a['ack']}, {a['threads']} threads)", fmt(a["records"]),
         fmt(a["seconds"]), fmt(a["mb_per_s"]), fmt(a["records_per_s"]), fmt(a["batch_records"]), _cpu(a), "-"]])
    labels = {"kafka_cold": "Kafka consumer, cold server", "kafka_warm": "Kafka consumer, warm server",
              "read_arrow_cold": "read_arrow, cold store", "read_arrow_warm": "read_arrow, warm store",
              "read_arrow_api_topic": "read_arrow, the Python API's topic"}
    body.heading("Catch-up").table(["read", "records", "seconds", "MB/s", "records/s", "process CPU", "client CPU",
                                    "verified"], [
        [labels[name], fmt(r["records"]), fmt(r["seconds"]), fmt(r["mb_per_s"]), fmt(r["records_per_s"]), _cpu(r),
         _cpu(r, "client_cpu"), "OK" if r["verified"] else "FAILED"] for name, r in catchup.items()])
    body.heading("End to end at half load").paragraph(
        f"{fmt(e2e['rate_mb_per_s'])} MB/s offered ({fmt(e2e['rate_records_per_s'])} records/s) for "
        f"{c['e2e_seconds']:g} s per path: half the Kafka produce rate above.")
    _e2e_table(body, e2e)
    if (light := result.get("e2e_light")) is not None:
        body.heading("End to end at light load (reported, not judged)").paragraph(
            f"{fmt(light['rate_mb_per_s'])} MB/s offered for {light['seconds']:g} s per path: 1/{LIGHT_LOAD_FRACTION} "
            "of the Kafka produce rate, where neither path's process is near a busy core: what the Kafka path adds "
            "when requests do not queue for the server's GIL.")
        _e2e_table(body, light)
    if "bounds" in result:
        bp, bc = result["bounds"]["produce"], result["bounds"]["catchup"]
        body.heading("What this machine allows").paragraph(
            "Ceilings from this run's own CPU measurements (`bounds` in the JSON): the server's and the client's "
            f"CPU seconds together, spread perfectly over {bp['cores']} cores, and a consumer's main thread on one "
            "core. No server change can take a path past them.")
        body.table(["path", "server + client CPU", "ceiling on the cores", "ceiling of the client's main thread",
                    "as a ratio of the reference", "target"], [
            ["Kafka produce", f"{fmt(bp['server_and_client_cpu_s'])} s", f"{fmt(bp['cores_ceiling_mb_per_s'])} MB/s",
             "-", fmt(bp["ceiling_ratio"]), f">= {PRODUCE_TARGET}"],
            ["Kafka catch-up, cold", f"{fmt(bc['server_and_client_cpu_s'])} s",
             f"{fmt(bc['cores_ceiling_mb_per_s'])} MB/s", f"{fmt(bc['client_main_thread_ceiling_mb_per_s'])} MB/s",
             fmt(bc["ceiling_ratio"]), f">= {CATCHUP_TARGET}"]])
        be = result["bounds"].get("e2e")
        if be is not None:
            body.paragraph(
                f"End to end at half load, the server's process kept {fmt(be['server_busy_cores'])} cores busy "
                f"({fmt(be['server_cpu_s'])} s of CPU in {fmt(be['wall_s'])} s): "
                f"{fmt(be['server_cpu_ms_per_mb'])} ms of CPU per MB in the producer's {c['linger_ms']} ms batches, "
                f"against {fmt(be['produce_server_cpu_ms_per_mb'])} ms per MB in the produce phase's full ones. "
                "Its Python runs under one GIL, so near one busy core requests queue for it, and the queue is what "
                "the added latency measures.")
    body.heading("What the server saw").paragraph(
        "Requests per API over each Kafka phase and their mean time from arrival to response (the server's "
        "metrics; a long-polling Fetch waits up to `fetch.wait.max.ms` for data), and fetched batches by source.")
    body.bullets(f"{label}: {_server(part)}" for label, part in (
        ("produce", produce["kafka"]), ("catch-up, cold", catchup["kafka_cold"]),
        ("catch-up, warm", catchup["kafka_warm"]), ("end to end", e2e["kafka"])))
    body.heading("Clients").bullets([
        "producer: " + ", ".join(f"`{k}={v}`" for k, v in result["clients"]["producer"].items()),
        "consumer: " + ", ".join(f"`{k}={v}`" for k, v in result["clients"]["consumer"].items()),
        f"server: acks=all acknowledged at `{result['server']['acks_all']}`; options {result['server']['options']}"])
    title = f"Kafka benchmark: {result['target']['spec']}{' (quick)' if c['quick'] else ''}"
    return render_result(result, title, body, verified="every record of every read, count and CRC32C of the values "
                                                       "in offset order per partition, as written")

