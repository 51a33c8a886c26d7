"""twinserve: LLM-serving policies on two backends.

The repository root is this package. Subpackages, in dependency order (an import only points down):
``experiments`` -> ``simulator``, ``engine``, ``server``; ``server`` -> ``engine``;
``simulator``, ``engine`` -> ``policies`` -> ``core``. See DESIGN.md beside the checkout.
"""

__version__ = "0.1.0"
