"""Checks of what the worker wrote: ``status`` (rows against acknowledged documents, per kind and
project) and ``verify`` (the documents the database implies against what Chroma holds).
"""
