"""The layout of memsync's embedding store (``DATA_DIR/embeddings.db``): every vector the sync
embedded, keyed by what produced it and the exact text, so that no text is embedded twice
(the reason follows). Written and read by the worker only (``worker.stores.embedstore``).

Why: embedding is the whole cost of a sync (about 5 ms per document on two cores, measured)
and a vector is a pure function of (model, text). A ``resync --rebuild`` with the same model, a
document re-derived with the same text (a ``DOCS_VERSION`` bump, a fact that moved to another
index) and identical texts (repeated prompts, repeated facts) can all take the stored vector.

Layout, one SQLite file in WAL mode (the worker and a ``resync`` may write at the same time):

- ``models``: one line per embedding identity (``embedding.vector_identity``: provider,
  model id, dimension, endpoint, token limit; vectors of two identities never meet), with the
  model id the sync records name (``docs.model`` in ``state.db``) for the garbage collection;
- ``vectors``: ``(model, text_hash) → vec``, ``text_hash`` the 16 bytes of a document's
  ``text_hash`` (a hash of exactly the embedded text, ``worker.rows.documents``), ``vec``
  :data:`DTYPE` components followed by the CRC-32 of their bytes, and ``added_s`` (epoch
  seconds) so that a collection never removes a vector whose sync record is still being written.
  A rowid table with a unique index on the key, not a WITHOUT ROWID table keyed by it: the keys
  are random, so a table ordered by them leaves its pages part-full and a lookup reads pages of
  whole vectors, while rows appended in rowid order fill their pages. Measured with 20,000
  MiniLM-sized entries inserted 256 at a time: 851 bytes per vector and 0.8 ms for a lookup of
  256 keys, against 982 bytes and 3.1 ms keyed (944 bytes and 1.8 ms with 16 KB pages).

float16, not the vector copy's int8: the model's unit vectors have components well inside
float16's range, and its 11-bit mantissa moves a vector by a cosine of about 1e-7 (measured by
``scripts/bench_sync.py``), so a rebuild from the store loses nothing measurable; half the bytes
of float32. A value of the wrong length (another dimension) or whose checksum fails is never
used: the text is embedded again and the entry overwritten.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memsync.config.settings import Settings

FILE = "embeddings.db"
DTYPE = np.dtype("<f2")
CRC_BYTES = 4

# auto_vacuum must be chosen before the first table exists: INCREMENTAL lets a collection give
# freed pages back to the file system (``PRAGMA incremental_vacuum``) without a full VACUUM.
DDL = """
PRAGMA auto_vacuum = INCREMENTAL;
CREATE TABLE IF NOT EXISTS models (
  id INTEGER PRIMARY KEY,
  identity TEXT NOT NULL UNIQUE,
  model TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS vectors (
  id INTEGER PRIMARY KEY,
  model INTEGER NOT NULL,
  text_hash BLOB NOT NULL,
  added_s INTEGER NOT NULL,
  vec BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS vectors_by_key ON vectors(model, text_hash);
"""


def store_path(settings: Settings) -> Path:
    """Where the embedding store lives."""
    return settings.data_dir / FILE


def hash_key(text_hash: str) -> bytes:
    """A document's ``text_hash`` (hex) as the key's bytes (half the size of the hex text)."""
    return bytes.fromhex(text_hash)


def encode(vector: npt.NDArray[np.float32]) -> bytes:
    """A vector as stored: its float16 components, then the CRC-32 of their bytes."""
    data = np.asarray(vector, dtype=DTYPE).tobytes()
    return data + zlib.crc32(data).to_bytes(CRC_BYTES, "little")


def decode(blob: bytes, dim: int) -> npt.NDArray[np.float32] | None:
    """The stored vector as float32, or None when it cannot be trusted: a length that is not
    ``dim`` components (another model's, or truncated), a checksum that fails, a value that is
    not finite."""
    if not isinstance(blob, bytes) or len(blob) != dim * DTYPE.itemsize + CRC_BYTES:
        return None
    data = blob[:-CRC_BYTES]
    if zlib.crc32(data) != int.from_bytes(blob[-CRC_BYTES:], "little"):
        return None
    vector = np.frombuffer(data, dtype=DTYPE).astype(np.float32)
    return vector if bool(np.isfinite(vector).all()) else None


def roundtrip(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``vectors`` as the store gives them back (float16 precision), so that a document's vector
    is the same bit for bit whether it was just embedded or read from the store."""
    return np.asarray(vectors, dtype=DTYPE).astype(np.float32)
