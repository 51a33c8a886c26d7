"""A swept knob other than the policy labels (say kv.num_pages) names the series and the headline
table shows the prefix hit rate and its share of the trace's bound."""

from __future__ import annotations

import pandas as pd

from twinserve.experiments.report.markdown import headline_table
from twinserve.experiments.report.plotting import add_series, series_styles, swept_knobs


def _df() -> pd.DataFrame:
    rows = []
    for cache in ("radix", "none"):
        for pages in (100, 5000):
            rows.append({"combo": f"fcfs+{cache}", "policy": "fcfs", "cache": cache, "backend": "sim",
                         "overrides": f"scheduler=fcfs cache={cache} kv.num_pages={pages} seed={pages} hydra.job.id={pages}",
                         "completed": 10, "mean_ttft_ms": 1.0, "prefix_cache.hit_rate": 0.1 if cache == "radix" else 0.0,
                         "prefix_cache.of_bound": 0.5 if cache == "radix" else 0.0})
    return pd.DataFrame(rows)


def test_swept_overrides_name_the_series() -> None:
    df = _df()
    assert swept_knobs(df) == ["kv.num_pages"]
    s = add_series(df)["series"].tolist()
    assert s == ["fcfs+radix kv.num_pages=100", "fcfs+radix kv.num_pages=5000",
                 "fcfs+none kv.num_pages=100", "fcfs+none kv.num_pages=5000"]
    styles = series_styles(add_series(df))
    assert len({str(v["ls"]) for v in styles.values()}) == 4     # four lines, four dash patterns
    assert add_series(df.head(1))["series"].tolist() == ["fcfs+radix"]   # nothing varies: no suffix


def test_headline_keeps_the_prefix_hit_rate_columns() -> None:
    t = headline_table(add_series(_df()))
    assert {"prefix_cache.hit_rate", "prefix_cache.of_bound"} <= set(t.columns)


def test_a_run_missing_a_label_still_gets_a_named_series_and_a_style() -> None:
    """A run whose summary lacks a label (its policy, backend or workload is NaN, as in an old
    run folder) is named and styled like the others instead of failing the report."""
    df = _df()
    df["workload"] = ["a", "a", "b", None]
    df.loc[0, "policy"] = None
    df.loc[1, "backend"] = float("nan")
    named = add_series(df)
    assert named["series"].tolist() == ["fcfs+radix [sim] @a kv.num_pages=100", "fcfs+radix @a kv.num_pages=5000",
                                        "fcfs+none [sim] @b kv.num_pages=100", "fcfs+none [sim] kv.num_pages=5000"]
    styles = series_styles(named)
    assert set(styles) == set(named["series"])
    assert all(isinstance(v["color"], tuple) for v in styles.values())
