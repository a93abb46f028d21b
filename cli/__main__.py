"""``python -m memsync``: the ``memsync`` command."""

from memsync.main import main

if __name__ == "__main__":
    main()
