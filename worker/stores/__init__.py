"""The derived stores the pass keeps beside Chroma: memsync's text index (``textsync``), the local
vector copy (``vectorcopy``, ``copykeys``), the embeddings kept for reuse (``embedstore``), and
their compaction (``compact``).
"""
