"""How far apart the hand-rolled LayerNorm's two operation orders put a model's logits.

    .venv/bin/python scripts/layernorm_order.py

`model.op_order=normsweep` multiplies x - mean by the scale before dividing; `study` (the study's gpt.py)
divides, then scales. Equal while every scale is 1, so the scales are moved first (N(1, 0.1)), as
training moves them. A 4-layer x 256 GPT (GPT-2's vocabulary, context 256, explicit attention) with the
same weights under each order, on two sequences: the largest difference of a logit, fp32 and under
bf16 autocast on the CPU.
"""

from __future__ import annotations

import torch

from src.model.gpt import GPTConfig, GPTModel
from src.model.norms import HandLayerNorm

SMALL = {"context_length": 256, "emb_dim": 256, "n_heads": 4, "n_layers": 4, "norm_type": "hand_layernorm", "attention": "explicit"}


def main() -> None:
    torch.manual_seed(0)
    ours = GPTModel(GPTConfig(**SMALL))  # type: ignore[arg-type]
    with torch.no_grad():
        for module in ours.modules():
            if isinstance(module, HandLayerNorm):
                module.scale.copy_(1 + 0.1 * torch.randn_like(module.scale))
    study = GPTModel(GPTConfig(**SMALL, op_order="study"))  # type: ignore[arg-type]
    study.load_state_dict(ours.state_dict())  # by name: the two register their parameters in other orders
    idx = torch.randint(0, ours.cfg.vocab_size, (2, 256), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        print(f"fp32: largest |logit difference| {(ours(idx) - study(idx)).abs().max().item():.3g}")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            gap = (ours(idx).float() - study(idx).float()).abs().max().item()
        print(f"bf16 autocast: largest |logit difference| {gap:.3g}")


if __name__ == "__main__":
    main()
