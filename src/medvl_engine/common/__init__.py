"""Helpers every package of the engine uses: atomic writes, the cache folder, the console, limits
from the environment, errors of the machine in words, content fingerprints, privacy of file
properties.
"""

__all__: list[str] = []
