"""Build an offline byte-level BPE tokenizer whose vocabulary size equals a model's exactly."""

from __future__ import annotations

import json
from pathlib import Path

SPECIALS = ("<pad>", "<s>", "</s>")  # ids 0, 1, 2 = pad, bos, eos (as in the shapes' config.json)

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_COMMON = "Ġ" + "etaoinshrdlucmfwypvbgkjqxz" + "ETAOINSHRDLUCMFWYPVBGKJQXZ" + "0123456789" + ".,!?'-:;\"()Ċ"


def build_vocab(vocab_size: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Specials, the 256 byte symbols, then synthetic merges (token + common char) in a fixed
    breadth-first order until ``vocab_size`` entries exist. Deterministic."""
    from tokenizers import pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet(), key=lambda ch: (ch not in _COMMON, ord(ch)))
    base = len(SPECIALS) + len(alphabet)
    if vocab_size < base:
        raise ValueError(f"vocab_size {vocab_size} is below the {base} specials and byte symbols")
    vocab: dict[str, int] = {s: i for i, s in enumerate(SPECIALS)}
    for ch in alphabet:
        vocab[ch] = len(vocab)
    merges: list[tuple[str, str]] = []
    frontier = list(_COMMON)
    while len(vocab) < vocab_size:
        nxt: list[str] = []
        for left in frontier:
            for right in _COMMON:
                tok = left + right
                if tok in vocab:
                    continue
                vocab[tok] = len(vocab)
                merges.append((left, right))
                nxt.append(tok)
                if len(vocab) == vocab_size:
                    return vocab, merges
        frontier = nxt
    return vocab, merges


def write_tokenizer(out_dir: Path, vocab_size: int, max_length: int) -> None:
    """Write tokenizer.json, tokenizer_config.json (with a Jinja chat template) and
    special_tokens_map.json into ``out_dir``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    vocab, merges = build_vocab(vocab_size)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    if tok.get_vocab_size() != vocab_size:
        raise AssertionError(f"tokenizer has {tok.get_vocab_size()} entries, expected {vocab_size}")
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    special = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}
    cfg = dict(special, tokenizer_class="PreTrainedTokenizerFast", model_max_length=max_length,
               clean_up_tokenization_spaces=False, add_bos_token=True, chat_template=CHAT_TEMPLATE)
    (out_dir / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
