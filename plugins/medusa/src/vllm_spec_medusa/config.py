"""The Medusa draft config (no torch or vLLM import: it is pickled to every vLLM process)."""

from __future__ import annotations

from transformers import PretrainedConfig

#: Config keys other Medusa releases use, mapped to ours.
ALIASES = {
    "medusa_num_heads": "num_heads",
    "num_medusa_heads": "num_heads",
    "medusa_num_layers": "num_hidden_layers",
    "num_medusa_layers": "num_hidden_layers",
}


class MedusaConfig(PretrainedConfig):
    """Medusa heads: ``num_heads`` heads of ``num_hidden_layers`` residual blocks each.

    ``hidden_size`` and ``vocab_size`` default to the target's when the checkpoint
    omits them (old FasterDecoding configs do). Unlike vLLM 0.32's MedusaConfig there
    is no ``num_lookahead_tokens`` alias: ``--spec-tokens`` never changes the number
    of heads, and asking for more tokens than heads is an error.
    """

    model_type = "medusa"

    def __init__(
        self,
        hidden_size: int | None = None,
        vocab_size: int | None = None,
        num_heads: int = 5,
        num_hidden_layers: int = 1,
        truncated_vocab_size: int | None = None,
        original_lm_head: bool = False,
        logit_scale: float = 1.0,
        **kwargs,
    ) -> None:
        for old, new in ALIASES.items():
            if old in kwargs:
                value = kwargs.pop(old)
                if new == "num_heads":
                    num_heads = value
                else:
                    num_hidden_layers = value
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.num_heads = num_heads
        self.num_hidden_layers = num_hidden_layers
        self.truncated_vocab_size = truncated_vocab_size
        self.original_lm_head = original_lm_head
        self.logit_scale = logit_scale
        kwargs.setdefault("architectures", ["MedusaModel"])
        super().__init__(**kwargs)

    @property
    def draft_vocab_size(self) -> int | None:
        """Rows of each lm_head: the truncated vocabulary when a token_map is used."""
        return self.truncated_vocab_size or self.vocab_size
