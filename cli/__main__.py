"""``python -m memsync``: the ``memsync`` command (its help says ``memsync``, as the installed command's does)."""

from memsync.entry import main

if __name__ == "__main__":
    main()
