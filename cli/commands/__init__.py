"""The ``memsync`` subcommands, one module per family; :mod:`memsync.main` registers them."""
