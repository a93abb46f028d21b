"""memsync search library (the full hybrid search arrives with the search issue).

For now: :func:`lookup`, a minimal semantic query straight from Chroma, collapsed per row.
"""

from search.lookup import Hit, lookup

__all__ = ["Hit", "lookup"]
