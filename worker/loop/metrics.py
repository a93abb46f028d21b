"""Prometheus metrics of the worker (``memsync worker --metrics-port N``), on 127.0.0.1 only.

The same figures as ``worker.json``; a private registry, so nothing else in the process leaks in.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


class WorkerMetrics:
    """Gauges and counters updated by the worker after each step."""

    def __init__(self, port: int) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.up = Gauge("memsync_worker_up", "1 while the worker runs", registry=r)
        self.chroma = Gauge("memsync_chroma_reachable", "1 when Chroma answered the last call", registry=r)
        self.embedding = Gauge("memsync_embedding_reachable", "0 while the embedding endpoint fails", registry=r)
        self.degraded = Gauge("memsync_degraded", "1 while sync is failing and backing off", registry=r)
        self.lag = Gauge("memsync_lag_seconds", "Age of the oldest row not yet synced", registry=r)
        self.pending = Gauge("memsync_pending_rows", "Rows above the sync watermarks", registry=r)
        self.failed = Gauge("memsync_failed_rows", "Rows left as failed after retries", registry=r)
        self.errors = Gauge("memsync_consecutive_errors", "Failed attempts in the current degraded period",
                            registry=r)
        self.docs = Counter("memsync_documents", "Documents written to Chroma", ["op"], registry=r)
        self.reconciles = Counter("memsync_reconciles", "Full reconcile passes completed", registry=r)
        self._seen: dict[str, int] = {}
        self._reconciles = 0
        self.server, self.thread = start_http_server(port, addr="127.0.0.1", registry=r)

    def update(self, status: Any) -> None:
        """Copy the worker's status into the metrics."""
        self.up.set(0 if status.stopping else 1)
        self.chroma.set(1 if status.chroma_reachable else 0)
        self.embedding.set(1 if status.embedding_reachable else 0)
        self.degraded.set(1 if status.degraded else 0)
        self.lag.set(status.lag_ms / 1000)
        self.pending.set(status.pending_rows)
        self.failed.set(status.failed_rows)
        self.errors.set(status.consecutive_errors)
        for op, total in status.totals.items():
            self.docs.labels(op=op).inc(max(0, total - self._seen.get(op, 0)))
            self._seen[op] = total
        self.reconciles.inc(max(0, status.reconciles - self._reconciles))
        self._reconciles = status.reconciles

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
