"""The recipe floor counts the work of the side-by-side's requests exactly."""

from twinserve.bench.recipe import recipe
from twinserve.bench.recipe_floor import main, recipe_work
from twinserve.core.model_shapes import get_shape


def test_kv_and_flops_match_a_token_by_token_count():
    shape = get_shape("qwen3-0.6b")
    w = recipe_work(shape, seed=5, n=4)
    r = recipe(5, n=4)
    reads = fed = 0
    for prompt, out in zip(r.prompts, r.output_lens):
        ctx = len(prompt)
        fed += ctx
        for _ in range(out):  # each output token's step reads the whole context so far
            reads += ctx
            ctx += 1
        fed += out - 1  # every output token but the last is fed back
    assert w.kv_bytes == reads * 28 * 2 * 8 * 128 * 2
    per_token = 2 * 28 * shape.layer_params()
    assert w.gemm_flops == fed * per_token + r.output_tokens * 2 * shape.vocab_size * shape.hidden_size
    assert w.min_steps == max(r.output_lens) and w.output_tokens == r.output_tokens


def test_floor_is_the_two_reads_back_to_back(capsys):
    w = recipe_work(get_shape("llama3-8b"), seed=1, n=8)
    assert w.floor_s(2.0, 500.0) == w.kv_bytes / 2e12 + w.gemm_flops / 5e14
    assert w.floor_s(4.0, 1000.0) == w.floor_s(2.0, 500.0) / 2
    main(["--model", "llama3-8b", "--seeds", "1", "--vs", "10000"])
    out = capsys.readouterr().out
    assert "| 1 | 156,222 |" in out and out.strip().endswith("x |")
