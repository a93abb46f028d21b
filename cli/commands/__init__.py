"""The ``memsync`` subcommands, one module per family (``sync``, ``search``, ``serve``, ``db``) on
the shared helpers of ``options``; :mod:`memsync.main` registers them."""
