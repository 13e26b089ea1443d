"""Decoding with ablate's model: prefill a prompt, then one token at a time, with or without
a KV cache (:class:`ablate.nn.attention.KVCache`).

Without the cache every step runs the model over the whole sequence so far and keeps the last
position's logits; with it the prompt is run once (prefill) and each further step runs only the
new token against the cached keys and values. Both give the same tokens and, within float
tolerance, the same logits, for every norm kind and placement (the norms act on each position
alone, so nothing else needs caching). Greedy decoding takes the argmax; ``temperature`` > 0
samples from the softmax with a generator seeded by ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ablate.nn.attention import KVCache
from ablate.nn.model import GPT


@dataclass
class Decoded:
    """Prompt plus generated ids (B, T0 + n), and the logits each new token was chosen from
    (B, n, V)."""

    tokens: torch.Tensor
    logits: torch.Tensor


def choose(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> torch.Tensor:
    """The next ids (B, 1) from the last position's logits (B, V): argmax, or a sample."""
    if temperature <= 0:
        return logits.argmax(dim=-1, keepdim=True)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs.cpu(), 1, generator=generator).to(logits.device)


@torch.no_grad()
def generate(
    model: GPT,
    prompt: torch.Tensor,
    new_tokens: int,
    cache: bool = True,
    temperature: float = 0.0,
    seed: int = 0,
) -> Decoded:
    """Continue ``prompt`` (B, T0) by ``new_tokens`` tokens; prompt plus new must fit in
    ``model.cfg.seq_len`` (ablate's positions end there)."""
    total = prompt.shape[1] + new_tokens
    if total > model.cfg.seq_len:
        raise ValueError(f"prompt + new tokens = {total} > model.seq_len {model.cfg.seq_len}")
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    weight = model.tok_emb.weight
    kv = KVCache(model.cfg, prompt.shape[0], weight.device, weight.dtype) if cache else None
    tokens, chosen_from = prompt, []
    step_input = prompt
    for _ in range(new_tokens):
        logits = model(step_input, kv) if kv is not None else model(tokens)
        last = logits[:, -1]
        chosen_from.append(last)
        next_ids = choose(last, temperature, generator)
        tokens = torch.cat((tokens, next_ids), dim=1)
        step_input = next_ids
    model.train(was_training)
    return Decoded(tokens, torch.stack(chosen_from, dim=1))
