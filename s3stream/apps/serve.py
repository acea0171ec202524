"""``s3stream serve``: keep a store's periodic maintenance running and expose its Prometheus metrics.

Flushing WAL data and sealing rolled segments already run inside an open store. :class:`ServeLoop`
adds the periodic passes a long-lived process owes the bucket:

* **retention** (``Store.run_retention``) every ``log.retention.check.interval.ms`` (rules RET-1..9);
* **garbage collection** (``Store.collect_garbage``) every ``gc_interval_ms``;
* **the cleaner**: ``log.cleaner.threads`` loops (``cleaner.CleanerService``) that clean the dirtiest
  compacted partition and apply retention to compacted topics, idling ``log.cleaner.backoff.ms``
  (off when ``log.cleaner.enable`` is false);
* the store's registry (``Store.metrics_registry``) over HTTP with ``prometheus_client``, bound to
  127.0.0.1 unless told otherwise (metrics name topics; they are not for the open internet).

Vocabulary: a **task** is one periodic pass; an **iteration** runs every task that is due, then waits
on the stop event until the next one is due (pacing time comes from the store's clock).

Invariants:

* :meth:`ServeLoop.run` always runs at least one iteration and returns promptly once ``stop_event`` is
  set; the HTTP server is shut down on the way out, whatever happened. A metrics address that cannot be
  bound (the port is in use, the host is not an address of this machine) is an
  :class:`~s3stream.base.errors.InvalidConfig` naming it, raised before any task runs.
* A task whose capability is not installed yet (``ImportError``/``AttributeError``/``NotImplementedError``
  from the store) is disabled with one warning, never retried in a loop; a task that fails with an
  :class:`~s3stream.base.errors.S3StreamError` is logged and retried at its next interval, except
  :class:`~s3stream.base.errors.Closed` and :class:`~s3stream.base.errors.Fenced`, which end the loop.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from s3stream.base.errors import Closed, Fenced, InvalidConfig, S3StreamError

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from s3stream.store import Store

__all__ = ["DEFAULT_GC_INTERVAL_MS", "ServeLoop"]

log = logging.getLogger(__name__)

DEFAULT_GC_INTERVAL_MS = 60_000


@dataclass(slots=True)
class _Task:
    """One periodic pass and its schedule (monotonic seconds)."""

    name: str
    interval_s: float
    run: Callable[[], Any]
    next_due: float = 0.0
    runs: int = 0
    failures: int = 0
    disabled: str | None = None


class ServeLoop:
    """The maintenance loop of ``s3stream serve``; drive it with :meth:`run` (or :meth:`run_once`)."""

    def __init__(self, store: Store, *, metrics_port: int | None = 9100, metrics_host: str = "127.0.0.1",
                 retention_interval_ms: int | None = None, gc_interval_ms: int = DEFAULT_GC_INTERVAL_MS) -> None:
        """Args:
            store: the open store (the caller closes it).
            metrics_port: HTTP port of ``/metrics``; 0 picks a free port; None serves no metrics.
            metrics_host: address to bind (127.0.0.1 by default).
            retention_interval_ms: default ``store.settings.log_retention_check_interval_ms``.
            gc_interval_ms: how often garbage collection runs.
        """
        self._store = store
        self._clock = store.clock
        self._metrics_port = metrics_port
        self._metrics_host = metrics_host
        retention_ms = retention_interval_ms or store.settings.log_retention_check_interval_ms
        start = self._clock.monotonic()
        self.tasks = [_Task("retention", retention_ms / 1000.0, self._retention, start),
                      _Task("gc", gc_interval_ms / 1000.0, self._gc, start)]
        self.iterations = 0
        self._httpd: WSGIServer | None = None

    # -- metrics endpoint --------------------------------------------------------------------------

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """``(host, port)`` the metrics endpoint listens on, while :meth:`run` is running."""
        if self._httpd is None:
            return None
        return self._metrics_host, int(self._httpd.server_port)

    def _start_http(self) -> None:
        if self._metrics_port is None:
            return
        from prometheus_client import start_http_server

        try:
            self._httpd, _ = start_http_server(self._metrics_port, addr=self._metrics_host,
                                               registry=self._store.metrics_registry)
        except (OSError, ValueError) as exc:  # an unknown host: socket.gaierror; an IDNA-invalid one: UnicodeError
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            port_taken = isinstance(exc, OSError) and exc.errno in (errno.EADDRINUSE, errno.EACCES)
            raise InvalidConfig(f"cannot serve metrics on {self._metrics_host}:{self._metrics_port}: {reason} "
                                "(choose another --metrics-port, 0 for any free one, another --metrics-host, "
                                "or --no-metrics)", key="metrics_port" if port_taken else "metrics_host") from exc
        log.info("metrics on http://%s:%d/metrics", self._metrics_host, self._httpd.server_port)

    def _stop_http(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()

    # -- tasks -------------------------------------------------------------------------------------

    def _retention(self) -> Any:
        return self._store.run_retention()

    def _gc(self) -> Any:
        return self._store.collect_garbage()

    def _run_task(self, task: _Task) -> None:
        try:
            result = task.run()
        except (ImportError, AttributeError, NotImplementedError) as exc:
            task.disabled = f"{type(exc).__name__}: {exc}"
            log.warning("%s is not available in this build; disabled (%s)", task.name, task.disabled)
            return
        except (Closed, Fenced):
            raise
        except S3StreamError as exc:
            task.failures += 1
            log.error("%s pass failed (will retry in %.0f s): %s", task.name, task.interval_s, exc)
            return
        task.runs += 1
        log.info("%s pass done: %s", task.name, result)

    def run_once(self) -> None:
        """One iteration: run every enabled task that is due, and schedule its next run."""
        now = self._clock.monotonic()
        for task in self.tasks:
            if task.disabled is None and now >= task.next_due:
                self._run_task(task)
                task.next_due = self._clock.monotonic() + task.interval_s
        self.iterations += 1

    def _wait_s(self) -> float | None:
        due = [t.next_due for t in self.tasks if t.disabled is None]
        return None if not due else max(0.0, min(due) - self._clock.monotonic())

    def run(self, stop_event: threading.Event) -> None:
        """Serve metrics and run iterations until ``stop_event`` is set (at least one iteration)."""
        from cleaner import CleanerService

        cleaner = CleanerService(self._store.cleaner)
        self._start_http()
        cleaner.start()
        try:
            while True:
                self.run_once()
                if stop_event.is_set() or self._clock.wait(stop_event, self._wait_s()):
                    return
        finally:
            cleaner.stop()
            self._stop_http()
