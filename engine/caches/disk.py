"""The prefix cache's disk tier: entries as files under ``directory/fingerprint``, LRU by
bytes on disk, written by one background thread.

Invariants: only a complete file of this model's fingerprint whose MACs hold under the
tier's key is ever served (anything else found is deleted and counted: damaged, tampered,
foreign-keyed, or not a regular file of ours, which is never opened in a way that could
block); directories are 0700 and files 0600 (disk_files); files name namespaces only by
their keyed tags (disk_key); the files' bytes stay within ``max_bytes``
once a write settles; a write never blocks the engine thread beyond handing over its
state's buffers (a full queue drops the write, counted), and waits ``write_delay_s`` for a
longer entry to replace it. Index methods are thread-safe.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..hardware.device import end_thread
from .disk_files import Foreign, is_plain, private_dir
from .disk_format import SUFFIX, TEMP_SUFFIX, BadEntry, HostEntry, read_entry, read_meta, write_entry, writer_alive
from .disk_index import DiskEntry, DiskIndex
from .disk_key import entry_name, namespace_tag

__all__ = ["DiskEntry", "DiskStats", "DiskTier", "file_bytes"]

log = logging.getLogger("engine.caches.disk")


@dataclass(frozen=True)
class DiskStats:
    entries: int
    bytes: int
    hits: int
    writes: int
    evictions: int
    corrupt: int  # damaged, tampered, foreign-keyed or not regular files of ours (deleted, never served)
    dropped: int  # writes not made: the queue was full or the write failed


def file_bytes(entry: HostEntry) -> int:
    """A bound on the bytes ``entry``'s file takes: its tensors and its header."""
    return entry.nbytes + 8 * len(entry.tokens) + 64 * 1024


class DiskTier:
    def __init__(self, directory: Path | str, max_bytes: int, fingerprint: str, key: bytes, *,
                 queue_bytes: int = 512 << 20, trimmable: bool = True, write_delay_s: float = 0.25):
        """``key``: the secret (disk_key.load_key) every file's MACs, name and namespace tag are made under."""
        self.directory = Path(directory).expanduser().resolve() / fingerprint  # the operator's links followed
        self.max_bytes = max_bytes
        self.fingerprint = fingerprint
        self._key = bytes(key)
        # What the files and the index hold for a namespace (a keyed hash: no tenant name on disk).
        self.tag: Callable[[str], str] = functools.lru_cache(4096)(functools.partial(namespace_tag, self._key))
        self.trimmable = trimmable  # entries may serve shorter prompts (KV caches only)
        self._queue_bytes = queue_bytes
        self._lock = threading.Condition()
        self._index = DiskIndex()
        self._pending: deque[tuple[str, HostEntry]] = deque()
        self._pending_bytes = 0
        self._queued_at: dict[str, float] = {}  # key -> when it was queued
        self.write_delay_s = write_delay_s  # a write waits this long for a longer entry to replace it
        self._flushing = 0
        self._writing = False
        self._closed = False
        self.hits = self.writes = self.evictions = self.corrupt = self.dropped = 0
        private_dir(self.directory.parent)
        private_dir(self.directory)
        self._scan()
        self._thread = threading.Thread(target=self._write_loop, name=f"prefix-disk-{fingerprint[:8]}", daemon=True)
        self._thread.start()
        self._reader = ThreadPoolExecutor(1, thread_name_prefix=f"prefix-disk-read-{fingerprint[:8]}")

    # -- index -------------------------------------------------------------------------------

    def _scan(self) -> None:
        """Rebuilds the index from the directory; leftovers, bad and foreign files are deleted."""
        for path in sorted(self.directory.iterdir()):
            if not is_plain(path):  # judged by lstat: a FIFO or device is never opened
                self._discard(path, "is not a regular file of this server's user")
                continue
            if path.name.endswith(TEMP_SUFFIX):
                if not writer_alive(path.name):  # a write cut short
                    path.unlink(missing_ok=True)
                continue
            if not path.name.endswith(SUFFIX):
                continue
            try:
                meta, size = read_meta(path, self._key)
                tokens = tuple(json.loads(meta["tokens"]))
                if meta.get("fingerprint") != self.fingerprint:
                    raise BadEntry("belongs to another model")
                if path.name != entry_name(self._key, meta["namespace"], tokens) + SUFFIX:
                    raise BadEntry("is not named for its contents")
                mtime = os.lstat(path).st_mtime
            except (OSError, BadEntry, KeyError, ValueError, TypeError) as exc:
                self._discard(path, str(exc))
                continue
            self._index.add(path.name[: -len(SUFFIX)], DiskEntry(meta["namespace"], tokens, path, size,
                                                          used=mtime - time.time() + time.monotonic()))
        self._evict_over(self.max_bytes)
        if self._index:
            log.info("prefix cache disk tier: %d entries, %d bytes in %s", len(self._index), self.nbytes,
                     self.directory)

    def _discard(self, path: Path, why: str) -> None:
        log.warning("deleted prefix cache file %s: %s", path.name, why)
        try:
            path.unlink(missing_ok=True)  # a link or FIFO goes by its name: never followed or opened
        except OSError:  # a directory planted there: left, never read
            pass
        self.corrupt += 1

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._index.nbytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._index)

    def stats(self) -> DiskStats:
        with self._lock:
            return DiskStats(len(self._index), self._index.nbytes, self.hits,
                             self.writes, self.evictions, self.corrupt, self.dropped)

    def contains(self, namespace: str, tokens: Sequence[int]) -> bool:
        with self._lock:
            return entry_name(self._key, self.tag(namespace), tokens) in self._index

    def find(self, namespace: str, prompt: Sequence[int]) -> tuple[DiskEntry, int] | None:
        """The stored entry covering the most of ``prompt`` (never all of it) and how much it covers."""
        with self._lock:
            found = self._index.best(self.tag(namespace), tuple(prompt), self.trimmable)
        return found if found is not None and found[1] > 0 else None

    def read(self, entry: DiskEntry) -> HostEntry | None:
        """The entry's contents (its namespace: the tag), or None when its file is gone or bad
        (then deleted and counted)."""
        try:
            host = read_entry(entry.path, self._key)
            if host.fingerprint != self.fingerprint or tuple(host.tokens) != entry.tokens \
                    or host.namespace != entry.namespace:
                raise BadEntry("does not hold what its name says")
        except FileNotFoundError:
            self._forget(entry)
            return None
        except (OSError, Foreign, BadEntry) as exc:
            with self._lock:
                self._discard(entry.path, str(exc))
            self._forget(entry)
            return None
        with self._lock:
            entry.used = time.monotonic()
            self.hits += 1
        try:
            os.utime(entry.path)  # the order of use survives a restart
        except OSError:
            pass
        return host

    def read_async(self, entry: DiskEntry) -> Future:
        """``read(entry)`` on the tier's reader thread."""
        return self._reader.submit(self.read, entry)

    def _forget(self, entry: DiskEntry) -> None:
        with self._lock:
            key = entry.path.name[: -len(SUFFIX)]
            if self._index.get(key) is entry:
                self._index.pop(key)

    def clear(self) -> None:
        """Deletes every file (a flush)."""
        with self._lock:
            self._pending.clear()
            self._queued_at.clear()
            self._pending_bytes = 0
            while self._writing:
                self._lock.wait()
            for entry in self._index.values():
                entry.path.unlink(missing_ok=True)
            self._index.clear()

    # -- writes ------------------------------------------------------------------------------

    def write(self, entry: HostEntry) -> bool:
        """Queues ``entry`` for writing; False when it is already stored or does not fit the queue."""
        entry = dataclasses.replace(entry, namespace=self.tag(entry.namespace))
        key = entry_name(self._key, entry.namespace, entry.tokens)
        n = file_bytes(entry)
        with self._lock:
            if self._closed:
                return False
            if key in self._index:
                self._index[key].used = time.monotonic()
                return False
            if any(k == key for k, _ in self._pending):
                return False
            if self.trimmable:  # a queued entry this one extends is not worth a write of its own
                tokens = entry.tokens
                covered = [(k, e) for k, e in self._pending if e.namespace == entry.namespace
                           and len(e.tokens) < len(tokens) and tokens[: len(e.tokens)] == e.tokens]
                for item in covered:
                    self._pending.remove(item)
                    self._queued_at.pop(item[0], None)
                    self._pending_bytes -= file_bytes(item[1])
            if n > self.max_bytes or self._pending_bytes + n > self._queue_bytes:
                self.dropped += 1
                return False
            self._pending.append((key, entry))
            self._queued_at[key] = time.monotonic()
            self._pending_bytes += n
            self._lock.notify_all()
        return True

    def drain(self, timeout: float | None = None) -> bool:
        """Writes everything queued now (no write-behind delay) and waits until it settled; False on timeout."""
        with self._lock:
            self._flushing += 1
            self._lock.notify_all()
            try:
                return self._lock.wait_for(lambda: not self._pending and not self._writing, timeout)
            finally:
                self._flushing -= 1

    def close(self, timeout: float = 30.0) -> None:
        """Finishes queued writes (up to ``timeout``), then stops the writer."""
        self.drain(timeout)
        with self._lock:
            self._closed = True
            self._pending.clear()
            self._queued_at.clear()
            self._lock.notify_all()
        self._thread.join(timeout=5.0)
        self._reader.submit(end_thread)  # queued last: the reader's streams go before it does
        self._reader.shutdown(wait=True)

    def _write_loop(self) -> None:
        try:
            self._write_entries()
        finally:
            end_thread()

    def _write_entries(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._pending or self._closed)
                if self._closed:
                    return
                due = self._queued_at.get(self._pending[0][0], 0.0) + self.write_delay_s - time.monotonic()
                if due > 0 and not self._flushing:  # a later, longer entry may still replace it
                    self._lock.wait(due)
                    continue
                key, entry = self._pending.popleft()
                self._queued_at.pop(key, None)
                self._writing = True
            try:
                self._write_one(key, entry)
            except Exception:  # a failed write loses an entry, never the server
                log.warning("could not write a prefix cache entry of %d tokens", len(entry.tokens), exc_info=True)
                with self._lock:
                    self.dropped += 1
            finally:
                with self._lock:
                    self._pending_bytes -= file_bytes(entry)
                    self._writing = False
                    self._lock.notify_all()

    def _write_one(self, key: str, entry: HostEntry) -> None:
        size = file_bytes(entry)
        with self._lock:
            self._evict_over(self.max_bytes - size)
        path = self.directory / (key + SUFFIX)
        n = write_entry(path, entry, self._key)
        tokens = tuple(entry.tokens)
        with self._lock:
            self._index.add(key, DiskEntry(entry.namespace, tokens, path, n))
            self.writes += 1
            if self.trimmable:  # a longer entry serves its prefixes: they only take space
                for k in self._index.prefixes_of(key):
                    self._remove(k)
            self._evict_over(self.max_bytes)

    def _evict_over(self, limit: int) -> None:
        """Deletes the least recently used files until the tier holds at most ``limit`` bytes (lock held)."""
        total = self._index.nbytes
        for key in self._index.least_recent_first():
            if total <= limit:
                break
            total -= self._index[key].nbytes
            self._remove(key)

    def _remove(self, key: str) -> None:
        entry = self._index.pop(key)
        entry.path.unlink(missing_ok=True)
        self.evictions += 1
