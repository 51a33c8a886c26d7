"""`compare.differing_prompts`: whether two runs served the same requests."""

from __future__ import annotations

import pandas as pd

from twinserve.experiments.compare import differing_prompts


def test_prompt_lengths_are_compared_by_request_id() -> None:
    a = pd.DataFrame({"rid": [0, 1, 2, 3], "prompt_tokens": [10, 20, 30, 40]})
    b = pd.DataFrame({"rid": [3, 2, 1, 5], "prompt_tokens": [40, 31, 20, 7]})
    assert differing_prompts(a, b) == (1, 3)  # rid 2 differs; 0 and 5 are in one table only
    assert differing_prompts(a, a) == (0, 4)
