"""Data files shipped in the package: the MiniLM WordPiece tokenizer (``minilm-tokenizer.json``)."""
