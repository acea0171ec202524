"""Group-commit throughput probe (not a test; run by hand): ``python -m tests.wal.bench_throughput DIR``.

Compares the WAL's appends-per-second and MiB/s with N threads appending fixed-size payloads against
the disk's fsync'd sequential bandwidth, measured on the same directory as plain writes each followed by
fdatasync: at several sizes, and at the WAL's own bytes per fsync (the best any durable log can do with
that much data per sync; N closed-loop appenders give about N/2 entries per fsync, since half of them
queue while the other half's fsync runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time

from wal import FileWalStorage, WalWriter


class CountingStorage(FileWalStorage):
    """A FileWalStorage that counts fsyncs."""

    fsyncs = 0

    def fsync(self, name: str) -> None:
        CountingStorage.fsyncs += 1
        super().fsync(name)


def disk_baseline(directory: str, total_bytes: int, chunk_bytes: int) -> float:
    """MiB/s of sequential writes of ``chunk_bytes``, each followed by fdatasync."""
    path = os.path.join(directory, "baseline.bin")
    block = b"\xab" * chunk_bytes
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    written = 0
    while written < total_bytes:
        written += os.write(fd, block)
        os.fdatasync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    os.unlink(path)
    return written / elapsed / 2**20


def wal_run(directory: str, threads: int, payload_bytes: int, total_bytes: int) -> tuple[float, float, int]:
    """(MiB/s, appends/s, fsyncs) for ``threads`` appenders writing ``total_bytes`` in all."""
    CountingStorage.fsyncs = 0
    per_thread = total_bytes // payload_bytes // threads
    payload = b"\xcd" * payload_bytes
    wal_dir = os.path.join(directory, "wal")
    shutil.rmtree(wal_dir, ignore_errors=True)
    writer = WalWriter(storage=CountingStorage(wal_dir))

    def work() -> None:
        for _ in range(per_thread):
            writer.append(payload)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    start = time.perf_counter()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    elapsed = time.perf_counter() - start
    writer.close()
    count = per_thread * threads
    return count * payload_bytes / elapsed / 2**20, count / elapsed, CountingStorage.fsyncs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory", nargs="?", default=None)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--payload-kib", type=int, default=64)
    parser.add_argument("--total-mib", type=int, default=512)
    args = parser.parse_args()
    directory = args.directory or tempfile.mkdtemp(prefix="walbench-", dir="/var/tmp")
    total = args.total_mib * 2**20
    payload = args.payload_kib * 1024
    for chunk in (payload, 256 << 10, 512 << 10, 1 << 20, 4 << 20):
        print(f"disk: {chunk >> 10:6d} KiB writes + fdatasync: {disk_baseline(directory, total, chunk):8.1f} MiB/s")
    for threads in sorted({1, args.threads}):
        before = disk_baseline(directory, total, payload * max(1, threads // 2))
        mib_s, ops_s, fsyncs = wal_run(directory, threads, payload, total)
        count = total // payload // threads * threads
        per_fsync = count * payload // max(fsyncs, 1)
        same = (before + disk_baseline(directory, total, per_fsync)) / 2  # bracket the run: the disk drifts
        print(f"wal: {threads} threads x {args.payload_kib} KiB: {mib_s:8.1f} MiB/s, {ops_s:8.0f} appends/s, "
              f"{count / max(fsyncs, 1):.1f} appends per fsync; raw disk at the same {per_fsync >> 10} KiB "
              f"per fdatasync: {same:8.1f} MiB/s ({100 * mib_s / same:.0f}%)")
    if args.directory is None:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
