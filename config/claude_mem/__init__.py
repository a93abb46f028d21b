"""The agent's database as claude-mem writes it: tables and columns of both schema eras, the read-only connection."""
