"""Chroma access: the collections memsync writes (generations, identity) and the managed ``chroma run`` server."""
