"""The worker's injection listener: a thread in the ``memsync worker`` process that answers the
Claude Code hook client (``memsync claude-code inject``) over the data directory's unix socket
(``memsync.config.inject_channel``: path, protocol, timeouts).

Started by the ``memsync worker`` command when ``inject`` is on; the sync loop knows nothing of it.
Nothing here can stop the worker: a socket that cannot be bound (a full disk, an unsafe short-path
directory) is one warning and the worker syncs on without injection; an answer that fails is one
warning and an ``{"error": ...}`` reply, and the next prompt is answered again.

- **The socket**: a stale one (a killed worker's) is removed before binding; it is bound, made
  0600 and only then listened on (a connection before ``listen`` is refused, so no one connects
  while it is still open to others); removed when the listener stops, if it is still ours.
- **The answers**: up to ``WORKERS`` prompts at once, each on a pool thread, through the one answer
  function (by default :class:`ServiceAnswer`: Part B's ``inject_service.answer`` with ONE warm
  :class:`~memsync.search.Searcher`, built on the first prompt). The searcher embeds queries with
  its own query-purpose model instance, not the worker's document embedder: that one holds a lock
  for a whole batch, and a prompt would wait behind a 1,000-row burst. Both run on one onnxruntime
  session (``embedding.local.get_embedder``), and the token counter uses the embedders' tokenizer:
  the worker's extra memory for injection stays under its 100 MB goal.
- **What status sees**: per hour the prompts asked, the prompts injected and their tokens
  (``DATA_DIR/inject.json``, ``config.formats.inject_stats``), never prompt text. Injected means
  the client got the reply: one ready after the client gave up finds its socket closed.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import os
import selectors
import socket
import stat
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

from memsync.config.errors import one_line
from memsync.config.formats.inject_stats import InjectStats
from memsync.config.inject_channel import (
    CLIENT_TIMEOUT_S,
    MAX_PAYLOAD_BYTES,
    SUPPORTED,
    ChannelError,
    Reply,
    check_private_dir,
    compacted,
    parse_request,
    short_dir,
    socket_path,
)
from memsync.config.settings import Settings
from memsync.worker.process.memory import trim

log = structlog.get_logger("memsync.inject")

# What answers a payload; it may also have ``warm(stop)`` (called once at start), ``delivered(payload,
# reply)`` (the hook read the reply) and ``close()`` (at stop), as ``ServiceAnswer`` has.
Answer = Callable[[dict[str, Any]], Reply]
# The vector side's deadline for a prompt's search: an answer after the client's 1 s (counted from the
# hook's process start, some 50-100 ms before the worker sees the request) reaches no prompt, and an
# embeddings endpoint slower than this is then found failing and left alone for a while (each prompt
# would otherwise pay one request nobody reads). Past it, the lexical answer: never injected.
SEARCH_TIMEOUT_MS = 800
WORKERS = 4  # prompts answered at once (4 Claude Code sessions on one machine)
BACKLOG = 16
ACCEPT_POLL_S = 0.25  # how soon the accept loop sees a stop
WARM_RETRY_S = 2.0
WARM_FOR_S = 300.0  # a managed Chroma may take its start timeout (60 s) a try, a first pass longer
# How long a stop waits for the prompts being answered and the warm-up step in flight. They run native
# code (the ONNX model, tantivy) with the GIL released: left running on a daemon thread while the
# process exits, they met the libraries' static destructors, and the worker died of an abort
# ("terminate called without an active exception", exit -6) instead of exiting 0.
STOP_JOIN_S = 20.0
READ_LIMIT = MAX_PAYLOAD_BYTES + 4096  # a request line: the payload plus the protocol's bytes


def search_settings(settings: Settings) -> Settings:
    """The settings of the listener's searcher: the user's, the deadline at most ``SEARCH_TIMEOUT_MS``."""
    return settings.model_copy(update={"search_timeout_ms": min(settings.search_timeout_ms, SEARCH_TIMEOUT_MS)})


class ServiceAnswer:
    """The real answer: ``servers.inject_service.answer`` with one warm Searcher, made on the first
    prompt (the worker's start is not held up by a model load nobody may need), and the sessions'
    memory of what was injected."""

    def __init__(self, settings: Settings) -> None:
        from memsync.servers.inject_service import SessionMemory

        self.settings = settings
        self.sessions = SessionMemory()
        self._searcher: Any = None
        self._lock = threading.Lock()

    def searcher(self) -> Any:
        """The one Searcher of the listener (built once; a failed build is tried again next prompt)."""
        with self._lock:
            if self._searcher is None:
                from memsync.search import Searcher

                self._searcher = Searcher(search_settings(self.settings))
            return self._searcher

    def warm(self, stop: threading.Event) -> None:
        """Build the searcher and load what the first prompt would (the query model, the store's
        collection, the token counter): the first prompt after a start would otherwise take about a
        second, the client's whole allowance. While the worker is still starting (no Chroma yet) it
        tries again every ``WARM_RETRY_S``, until ``stop`` or ``WARM_FOR_S``."""
        from memsync.config.tokens import count_tokens
        from memsync.search import SearchRequest

        # A remote model or reranker has nothing to load, and each warm-up query would be a request to
        # the user's endpoint (paid, perhaps slow or down, and retried below): warm only what is local.
        remote = "openai" in (self.settings.embedding_provider, self.settings.rerank_provider)
        started = time.perf_counter()
        error = ""
        while not stop.is_set() and time.perf_counter() - started < WARM_FOR_S:
            try:
                searcher = self.searcher()
                if not remote:
                    searcher.vector.embed("memsync warm-up query")  # the query model and the collection
                    searcher.search(SearchRequest(query="memsync warm-up query", limit=1))
                count_tokens("warm-up")
            except BaseException as exc:  # noqa: BLE001 - not ready yet (the worker is starting its store), or a native panic
                error = one_line(str(exc))
                stop.wait(WARM_RETRY_S)
                continue
            # The warm-up's garbage (the model's build, the first search's buffers) back to the
            # system now: the worker trims only after its own bulk work.
            gc.collect()
            trim()
            log.info("inject_warm", ms=round((time.perf_counter() - started) * 1000))
            return
        if not stop.is_set():
            log.info("inject_warm_failed", error=error)  # the first prompts pay the loading

    def __call__(self, payload: dict[str, Any]) -> Reply:
        from memsync.servers.inject_service import answer, forgot

        if forgot(payload, self.sessions):  # no search: at once, even while the searcher is not built yet
            return Reply()
        result = answer(payload, self.searcher(), self.settings, self.sessions)
        return Reply(context=result.context, refs=list(result.refs), tokens=result.tokens)

    def delivered(self, payload: dict[str, Any], reply: Reply) -> None:
        """The hook read ``reply``: its refs are now injected in the payload's session."""
        from memsync.servers.inject_service import delivered

        delivered(payload, reply.refs, self.sessions)

    def close(self) -> None:
        """Release the searcher's threads."""
        with self._lock:
            if self._searcher is not None:
                self._searcher.close()
                self._searcher = None


class InjectListener:
    """The listening thread and its pool; :meth:`start` then :meth:`stop` (both never raise)."""

    def __init__(self, settings: Settings, answer: Answer | None = None) -> None:
        self.settings = settings
        self.path = socket_path(settings.data_dir)
        self._answer: Answer = answer if answer is not None else ServiceAnswer(settings)
        self.stats = InjectStats(settings.data_dir)
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._inode: int | None = None
        self._thread: threading.Thread | None = None
        self._warm: threading.Thread | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="memsync-inject")
        self._save_failed = False

    def start(self) -> bool:
        """Bind and start serving; False (logged) when the socket cannot be: the worker goes on without."""
        if not SUPPORTED:
            log.warning("inject_unsupported", reason="no unix sockets on this platform")
            return False
        try:
            self._sock = self._bind()
        except (OSError, ChannelError) as exc:
            log.warning("inject_listen_failed", path=str(self.path), error=one_line(str(exc)))
            return False
        self._thread = threading.Thread(target=self._accept_loop, name="memsync-inject-listener", daemon=True)
        self._thread.start()
        warm = getattr(self._answer, "warm", None)
        if callable(warm):
            self._warm = threading.Thread(target=warm, args=(self._stop,), name="memsync-inject-warm", daemon=True)
            self._warm.start()
        log.info("inject_listening", path=str(self.path))
        return True

    def stop(self) -> None:
        """Stop accepting, remove the socket (if still ours), let the answers and the warm-up step in
        flight end (``STOP_JOIN_S`` at most), release the searcher."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._remove_socket()
        self._pool.shutdown(wait=True, cancel_futures=True)  # the prompts not yet started are dropped
        if self._warm is not None:
            self._warm.join(timeout=STOP_JOIN_S)
            if self._warm.is_alive():
                log.warning("inject_warm_still_running", waited_s=STOP_JOIN_S)
        close = getattr(self._answer, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()

    def _bind(self) -> socket.socket:
        if self.path.parent == short_dir():
            check_private_dir(self.path.parent, create=True)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)  # the worker makes it too, after the listener starts
        self._remove_stale()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(self.path))
            os.chmod(self.path, 0o600)
            self._inode = os.stat(self.path).st_ino
            sock.listen(BACKLOG)
        except OSError:
            sock.close()
            self._remove_socket()
            raise
        return sock

    def _remove_stale(self) -> None:
        """A killed worker's socket is left behind; only a socket is removed, never another file."""
        try:
            st = self.path.lstat()
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise ChannelError(f"{self.path} exists and is not a socket: refused")
        # One worker per data directory: a second one (about to stop on the worker lock) must not
        # take the running one's socket away. A socket that still answers is not stale.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(CLIENT_TIMEOUT_S)
            try:
                probe.connect(str(self.path))
            except OSError:
                pass
            else:
                raise ChannelError(f"another process listens on {self.path}")
        self.path.unlink()
        log.info("inject_stale_socket_removed", path=str(self.path))

    def _remove_socket(self) -> None:
        with contextlib.suppress(OSError):
            if self._inode is not None and self.path.lstat().st_ino == self._inode:
                self.path.unlink()

    def _accept_loop(self) -> None:
        assert self._sock is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self._sock, selectors.EVENT_READ)
            while not self._stop.is_set():
                try:
                    if not sel.select(ACCEPT_POLL_S):
                        continue
                    conn, _ = self._sock.accept()
                    self._pool.submit(self._serve, conn)
                except Exception as exc:  # noqa: BLE001 - the worker goes on; the next accept may work
                    if self._stop.is_set():
                        return
                    log.warning("inject_accept_failed", error=one_line(str(exc)))
                    self._stop.wait(ACCEPT_POLL_S)

    def _serve(self, conn: socket.socket) -> None:
        """One prompt: read its line, answer, reply, count. Nothing escapes (a native panic included)."""
        started = time.perf_counter()
        with conn:
            payload: dict[str, Any] | None = None
            try:
                payload, reply = self._reply(conn)
            except BaseException as exc:  # noqa: BLE001 - a thread's failure must not reach the worker
                log.warning("inject_failed", error=one_line(f"{type(exc).__name__}: {exc}"))
                reply = Reply(error=one_line(f"{type(exc).__name__}: {exc}"))
            try:
                conn.sendall(reply.line())
                delivered = True
            except OSError:  # a client that gave up (past its 1 s) has closed: nothing to tell
                delivered = False
        if reply.error is None and not (payload is not None and compacted(payload)):  # prompts only
            self._count(reply, delivered)
            if delivered and reply.refs and payload is not None:
                self._delivered(payload, reply)
        log.debug("inject_answered", refs=reply.refs, tokens=reply.tokens, delivered=delivered,
                  ms=round((time.perf_counter() - started) * 1000, 1))

    def _delivered(self, payload: dict[str, Any], reply: Reply) -> None:
        """Tell the answer its reply reached the hook (only then are its refs injected in the session:
        a late answer must not keep its memories from the session's next prompt)."""
        on_delivered = getattr(self._answer, "delivered", None)
        if callable(on_delivered):
            try:
                on_delivered(payload, reply)
            except Exception as exc:  # noqa: BLE001 - the prompt got its answer; the worker goes on
                log.warning("inject_record_failed", error=one_line(f"{type(exc).__name__}: {exc}"))

    def _reply(self, conn: socket.socket) -> tuple[dict[str, Any] | None, Reply]:
        """The request's payload (None when unreadable) and the answer to it."""
        conn.settimeout(CLIENT_TIMEOUT_S)
        data = bytearray()
        while len(data) <= READ_LIMIT:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
            if data.endswith(b"\n"):
                break
        if len(data) > READ_LIMIT:
            return None, Reply(error="request too long")
        try:
            payload = parse_request(bytes(data))
        except ChannelError as exc:
            return None, Reply(error=str(exc))
        return payload, self._answer(payload)

    def _count(self, reply: Reply, delivered: bool) -> None:
        # A context the client never read (a late answer, e.g. behind a slow embeddings endpoint) was
        # asked for but not injected: status counts what reached the prompt.
        self.stats.record(int(time.time() * 1000), reply.tokens if reply.context and delivered else None)
        try:
            self.stats.save()
        except OSError as exc:
            if not self._save_failed:
                log.warning("inject_stats_unwritable", path=str(self.stats.path), error=one_line(str(exc)))
            self._save_failed = True
        else:
            self._save_failed = False


EMBEDDED_REASON = "chroma_mode=embedded is single-process (injection needs managed or http)"
# The decision's thresholds are on the bundled English model's similarity scale. The multilingual
# model scores anything high (bench_inject --set multilingual: unrelated prompts' best match p50
# 0.83-0.85, questions' 0.87-0.90), so those thresholds let 202 of 251 unrelated prompts through:
# no memory rather than memory on every prompt, until the decision is calibrated for it.
UNCALIBRATED_REASON = ("the injection decision is not calibrated for embedding_provider=local-multilingual "
                       "(its similarities are high for unrelated prompts too)")


def unavailable_reason(settings: Settings) -> str | None:
    """Why the worker of ``settings`` answers no prompt although ``inject`` is on; None: it does."""
    if settings.chroma_mode == "embedded":
        # The embedded store is one process's, behind one file lock that the worker takes: the
        # real answer's Searcher would race the worker for it and stop the worker.
        return EMBEDDED_REASON
    if settings.embedding_provider == "local-multilingual":
        return UNCALIBRATED_REASON
    return None


def start_listener(settings: Settings, answer: Answer | None = None) -> InjectListener | None:
    """The running listener for the worker of ``settings``, or None when ``inject`` is off, the
    worker cannot answer (:func:`unavailable_reason`) or the socket cannot be bound (logged)."""
    if not settings.inject:
        return None
    if answer is None and (reason := unavailable_reason(settings)) is not None:
        log.info("inject_unavailable", reason=reason)
        return None
    listener = InjectListener(settings, answer)
    return listener if listener.start() else None

