"""The derived stores the sync pass keeps beside Chroma, each written here and read by the search.

- ``textsync``: memsync's text index (tantivy);
- ``vectorcopy``: the local vector copy's writer; ``copykeys``: its index of live documents;
- ``embedstore``: vectors by text, looked up before embedding;
- ``compact``: compaction of the Chroma store.

This ``__init__`` imports nothing on purpose: importing any module of the room runs it first, and
each of them pulls in numpy or tantivy. The command imports what it needs from the modules inside
the function that uses it, so ``memsync --help`` loads none of them.
"""
