"""twinserve: LLM-serving policies on two backends.

The repository root is this package. Subpackages, in dependency order (an import only points down):
``bench``, ``experiments`` -> ``calibration``, ``simulator``, ``engine``, ``server``;
``calibration`` -> ``simulator``; ``server`` -> ``engine``; ``simulator``, ``engine`` ->
``policies`` -> ``core``. See docs/design.md.
"""

__version__ = "0.1.0"
