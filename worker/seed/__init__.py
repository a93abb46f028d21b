"""claude-mem databases memsync writes for people without claude-mem: the demo memory (``demo``,
its handwritten ``demo_episodes``) and ``memsync db init`` / ``memsync db import`` (``importer``).
"""
