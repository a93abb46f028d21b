"""Chroma access, part of the shared kernel (the worker and the search both use it).

- ``collections``: Chroma clients and the collections memsync writes (generations, model identity);
- ``server``: the managed ``chroma run`` server; ``process``: which processes are such servers;
- ``remote``: a server someone else runs (TLS, token and headers, tenant and database, refusals).

This ``__init__`` imports nothing on purpose: importing any module of the package runs it first, and
``collections`` and ``server`` pull in numpy, pydantic and httpx, while ``process`` (which processes
are Chroma servers) is read on light paths.
"""
