"""/metrics carries speculative decoding's proposed and accepted token totals from the engine's stats."""

from __future__ import annotations

from twinserve.server.metrics import ServerMetrics


def test_spec_totals_reach_the_prometheus_text():
    m = ServerMetrics("m")
    text = m.render().decode()
    assert 'twinserve_spec_decode_num_draft_tokens_total{model_name="m"} 0.0' in text
    m.update_engine({"running": 1, "spec_decode_num_draft_tokens": 136, "spec_decode_num_accepted_tokens": 57})
    m.update_engine({"running": 1, "spec_decode_num_draft_tokens": 140, "spec_decode_num_accepted_tokens": 59})
    text = m.render().decode()
    assert 'twinserve_spec_decode_num_draft_tokens_total{model_name="m"} 140.0' in text
    assert 'twinserve_spec_decode_num_accepted_tokens_total{model_name="m"} 59.0' in text
