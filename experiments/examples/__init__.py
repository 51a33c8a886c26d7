"""Example plugins used by the policy developer's walk-through (README)."""
