"""The per-request logit processors of `SamplingParams` as batched tensor operations.

`SamplingExtras` holds one step's options as host arrays (row = position among the step's
sampled rows), built only when some request of the step sets an option, so that the default
path never pays for them; it names no request, so a tensor-parallel follower applies the same
processors to the same logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class SamplingExtras:
    """One step's logit-processor inputs (all row indices are sampled-row positions).

    Sparse lists are parallel arrays: ``bias_*`` adds ``bias_vals`` at (row, id) (``logit_bias``);
    ``ban_*`` sets (row, id) to -inf (EOS and stop tokens before ``min_tokens``); ``count_*``
    lists each output token once per occurrence (frequency and presence penalties); ``seen_*``
    lists each distinct prompt or output token once (repetition penalty). ``mask_rows`` /
    ``mask_bits`` ([rows, ceil(V / 32)] int32, bit ``i % 32`` of word ``i // 32`` set = token
    ``i`` allowed) is the grammar's mask. Per-row arrays have one entry per sampled row:
    ``presence``, ``frequency`` (0 = off), ``repetition`` (1 = off), ``min_p`` (0 = off),
    ``logprobs`` (-1 = off, else the number of alternatives). Invariant: ``penalized`` is true
    iff some row's penalty is on.
    """

    presence: np.ndarray
    frequency: np.ndarray
    repetition: np.ndarray
    min_p: np.ndarray
    logprobs: np.ndarray
    bias_rows: np.ndarray
    bias_ids: np.ndarray
    bias_vals: np.ndarray
    ban_rows: np.ndarray
    ban_ids: np.ndarray
    count_rows: np.ndarray
    count_ids: np.ndarray
    seen_rows: np.ndarray
    seen_ids: np.ndarray
    mask_rows: np.ndarray
    mask_bits: np.ndarray
    penalized: bool = False

    @property
    def wants_logprobs(self) -> bool:
        return bool((self.logprobs >= 0).any())

    @property
    def uses_min_p(self) -> bool:
        return bool((self.min_p > 0).any())


@dataclass
class LogprobsOut:
    """Log-probabilities of one step's sampled tokens under the model (log-softmax of the raw
    logits): for the sampled rows ``rows``, ``token`` [r] the sampled token's, ``top_ids`` /
    ``top_lp`` [r, K] the K most likely tokens (K = the largest request of the step)."""

    rows: np.ndarray
    token: torch.Tensor
    top_ids: torch.Tensor
    top_lp: torch.Tensor

    def to_cpu(self) -> "LogprobsOut":
        """The same on the host (waits for the device)."""
        return LogprobsOut(self.rows, self.token.cpu(), self.top_ids.cpu(), self.top_lp.cpu())


def _idx(a: np.ndarray, dev: torch.device) -> torch.Tensor:
    return torch.from_numpy(a).to(dev, non_blocking=True)


def unpack_mask(bits: torch.Tensor, vocab: int) -> torch.Tensor:
    """[rows, words] int32 bitmask -> [rows, vocab] bool (True = allowed); ids past the mask's
    width are disallowed."""
    shifts = torch.arange(32, device=bits.device, dtype=torch.int32)
    allowed = ((bits[:, :, None] >> shifts) & 1).bool().reshape(bits.shape[0], -1)
    if allowed.shape[1] >= vocab:
        return allowed[:, :vocab]
    pad = torch.zeros(bits.shape[0], vocab - allowed.shape[1], dtype=torch.bool, device=bits.device)
    return torch.cat([allowed, pad], dim=1)


def apply_processors(logits: torch.Tensor, ex: SamplingExtras) -> torch.Tensor:
    """``logits`` [rows, V] (float32) after logit_bias, bans, the grammar mask and penalties, in
    `SamplingParams`' order (returns a new tensor)."""
    dev = logits.device
    rows, vocab = logits.shape
    out = logits.clone()
    if ex.bias_rows.size:
        out.index_put_((_idx(ex.bias_rows, dev), _idx(ex.bias_ids, dev)),
                       _idx(ex.bias_vals, dev), accumulate=True)
    if ex.ban_rows.size:
        out[_idx(ex.ban_rows, dev), _idx(ex.ban_ids, dev)] = float("-inf")
    if ex.mask_rows.size:
        r = _idx(ex.mask_rows, dev)
        allowed = unpack_mask(_idx(ex.mask_bits, dev), vocab)
        out[r] = out[r].masked_fill(~allowed, float("-inf"))
    if ex.penalized:
        if ex.seen_rows.size:
            rp = _idx(ex.repetition, dev)[:, None].expand(rows, vocab)
            seen = torch.zeros(rows, vocab, dtype=torch.bool, device=dev)
            seen[_idx(ex.seen_rows, dev), _idx(ex.seen_ids, dev)] = True
            pen = torch.where(out > 0, out / rp, out * rp)
            out = torch.where(seen, pen, out)
        if ex.count_rows.size:
            counts = torch.zeros(rows, vocab, dtype=torch.float32, device=dev)
            counts.index_put_((_idx(ex.count_rows, dev), _idx(ex.count_ids, dev)),
                              torch.ones(ex.count_rows.size, device=dev), accumulate=True)
            out -= _idx(ex.frequency, dev)[:, None] * counts
            out -= _idx(ex.presence, dev)[:, None] * (counts > 0).float()
    return out


def apply_min_p(scaled: torch.Tensor, min_p: np.ndarray) -> torch.Tensor:
    """Drop tokens whose probability under softmax(``scaled``) is below ``min_p`` times the top
    token's (``min_p`` 0: nothing dropped); returns a new tensor."""
    mp = _idx(min_p.astype(np.float32), scaled.device)[:, None]
    probs = torch.softmax(scaled, dim=-1)
    drop = probs < mp * probs.max(dim=-1, keepdim=True).values
    return scaled.masked_fill(drop, float("-inf"))


def model_logprobs(logits: torch.Tensor, tokens: torch.Tensor, ks: np.ndarray) -> LogprobsOut:
    """`LogprobsOut` of the rows with ``ks >= 0`` (raw model ``logits``, sampled ``tokens``)."""
    rows = np.nonzero(ks >= 0)[0]
    r = _idx(rows, logits.device)
    lp = torch.log_softmax(logits[r].float(), dim=-1)
    k = max(1, int(ks[rows].max()))
    top_lp, top_ids = lp.topk(k, dim=-1)
    token = lp.gather(1, tokens[r].long()[:, None])[:, 0]
    return LogprobsOut(rows, token, top_ids, top_lp)


@dataclass
class PromptLogprobsSpec:
    """Prompt positions of one step whose next prompt token's logprob is wanted: ``tok_idx``
    (rows of the step's hidden states), ``targets`` (the prompt token that follows each), ``k``
    (alternatives, the most any request of the step asked for). ``rids`` / ``positions`` (host
    bookkeeping, unused on the device): whose and which prompt index each target is."""

    tok_idx: np.ndarray
    targets: np.ndarray
    k: int
    rids: np.ndarray
    positions: np.ndarray


PROMPT_LP_CHUNK = 1024  # prompt rows per logits computation (bounds the [rows, vocab] temporaries)


def prompt_logprobs(model, hidden: torch.Tensor, spec: PromptLogprobsSpec) -> LogprobsOut:
    """`LogprobsOut` of ``spec``'s targets under the model, from the step's ``hidden`` states."""
    dev = hidden.device
    idx = _idx(spec.tok_idx, dev)
    tgt = _idx(spec.targets, dev)
    k = max(1, spec.k)
    toks, ids, lps = [], [], []
    for a in range(0, idx.numel(), PROMPT_LP_CHUNK):
        lp = torch.log_softmax(model.compute_logits(hidden[idx[a:a + PROMPT_LP_CHUNK]]).float(), dim=-1)
        top_lp, top_ids = lp.topk(k, dim=-1)
        toks.append(lp.gather(1, tgt[a:a + PROMPT_LP_CHUNK, None])[:, 0])
        ids.append(top_ids)
        lps.append(top_lp)
    return LogprobsOut(np.arange(spec.tok_idx.size), torch.cat(toks), torch.cat(ids), torch.cat(lps))
