"""The background cleaner (issue 4, item 6): CleanerService loops, backoff, disable, clean shutdown."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cleaner.service import CleanerService

from .conftest import Env
from .kit import COMPACT, fold, kv, put_segment, read_all, triples

WAIT_S = 20.0


def wait_for(predicate: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_service_cleans_in_the_background_and_backs_off_when_idle(env: Env) -> None:
    store = env.open(log_cleaner_backoff_ms=20)
    store.create_topic("t", 1, dict(COMPACT))
    log = store.partition("t", 0)
    svc = CleanerService(store.cleaner)
    svc.start()
    try:
        put_segment(log, [("a", "1"), ("a", "2")])
        assert wait_for(lambda: log.manifest().cleaner_checkpoint == 2)
        put_segment(log, [("a", "3")])
        assert wait_for(lambda: log.manifest().cleaner_checkpoint == 3)
    finally:
        svc.stop()
    assert triples(read_all(log)) == [(2, b"a", b"3")]
    rounds = store.metrics_registry.get_sample_value("s3stream_cleaner_rounds_total", {"outcome": "cleaned"})
    assert rounds == 2.0                      # idle passes found nothing and did not clean again


def test_disabled_cleaner_starts_no_thread(env: Env) -> None:
    store = env.open(log_cleaner_enable=False, log_cleaner_backoff_ms=1)
    store.create_topic("t", 1, dict(COMPACT))
    log = store.partition("t", 0)
    put_segment(log, [("a", "1"), ("a", "2")])
    svc = CleanerService(store.cleaner)
    svc.start()
    time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name.startswith("s3stream-cleaner")]
    svc.stop()
    assert log.manifest().cleaner_checkpoint is None and len(read_all(log)) == 2


def test_stop_mid_round_lets_the_round_finish_and_loses_nothing(env: Env) -> None:
    writer = env.open("w")
    writer.create_topic("t", 1, dict(COMPACT))
    log = writer.partition("t", 0)
    put_segment(log, [("a", "1"), ("b", "1"), ("a", "2")])
    before = fold(read_all(log))
    cleaner, hook = env.open_hooked("c", log_cleaner_backoff_ms=20)
    entered, release = threading.Event(), threading.Event()

    def block() -> None:
        entered.set()
        release.wait(WAIT_S)

    hook.arm(block)
    svc = CleanerService(cleaner.cleaner)
    svc.start()
    assert entered.wait(WAIT_S)                     # the round is between its outputs and its swap
    stopper = threading.Thread(target=svc.stop)
    stopper.start()
    time.sleep(0.1)
    assert stopper.is_alive()                       # stop waits for the round in progress
    release.set()
    stopper.join(WAIT_S)
    assert not stopper.is_alive()
    m = log.manifest(refresh=True)
    assert m.cleaner_checkpoint == 3 and all(s.cleaned for s in m.segments)
    rlog = env.open("r").partition("t", 0)
    assert fold(read_all(rlog)) == before and triples(read_all(rlog)) == [(1, b"b", b"1"), (2, b"a", b"2")]
    put_segment(log, [("a", "3")])                 # stopped: nothing cleans any more
    time.sleep(0.1)
    assert log.manifest(refresh=True).cleaner_checkpoint == 3


def test_closing_the_store_after_a_pass_keeps_every_record(env: Env) -> None:
    store = env.open()
    store.create_topic("t", 1, dict(COMPACT))
    log = store.partition("t", 0)
    put_segment(log, [("a", "1"), ("a", "2")])
    log.append([kv("b", "1")])                     # unflushed when the pass starts; close must keep it
    store.run_cleaner()
    store.close()
    again = env.open().partition("t", 0)
    assert triples(read_all(again)) == [(1, b"a", b"2"), (2, b"b", b"1")]


def test_two_cleaner_threads_clean_every_partition_once_each_round(env: Env) -> None:
    store = env.open(log_cleaner_backoff_ms=10, log_cleaner_threads=2)
    store.create_topic("t", 4, dict(COMPACT))
    logs = [store.partition("t", p) for p in range(4)]
    for p, log in enumerate(logs):
        put_segment(log, [("a", f"{p}-1"), ("b", "1"), ("a", f"{p}-2")])
    svc = CleanerService(store.cleaner)
    svc.start()
    try:
        assert wait_for(lambda: all(log.manifest().cleaner_checkpoint == 3 for log in logs))
    finally:
        svc.stop()
    for p, log in enumerate(logs):
        assert triples(read_all(log)) == [(1, b"b", b"1"), (2, b"a", f"{p}-2".encode())]
    aborted = store.metrics_registry.get_sample_value("s3stream_cleaner_rounds_total", {"outcome": "aborted"})
    errors = store.metrics_registry.get_sample_value("s3stream_cleaner_rounds_total", {"outcome": "error"})
    assert not aborted and not errors
