"""The MLP speculator draft config (no torch or vLLM import: it is pickled to every vLLM process)."""

from __future__ import annotations

from transformers import PretrainedConfig


class MLPSpeculatorConfig(PretrainedConfig):
    """fms-extras' ``MLPSpeculatorConfig``, as IBM's ``*-accelerator`` checkpoints store it.

    ``n_predict`` heads; head ``i`` reads the previous head's state (the target's final
    hidden state for head 0, ``emb_dim`` wide) and the embedding of the previous token,
    and proposes the next one. ``inner_dim=0`` means ``emb_dim``. ``tie_weights``: one
    embedding, head and norm shared by every head, and one projection shared by heads
    ``1..n_predict-1`` (head 0's projection reads ``emb_dim`` and stays separate).
    ``scale_input``: normalise the target hidden state before head 0.

    ``top_k_tokens_per_head`` and ``n_candidates`` describe fms-extras' candidate *tree*;
    vLLM verifies one chain of drafts, so they are kept (the config round-trips) but not
    used: this plugin drafts the greedy chain (top-1 at every head).

    Unlike vLLM 0.32's class there is no ``num_lookahead_tokens`` (vLLM overwrites it
    with ``--spec-tokens``): asking for more tokens than ``n_predict`` is an error.
    ``emb_dim`` and ``vocab_size`` default to the target's when the config omits them.
    """

    model_type = "mlp_speculator"
    attribute_map = {"hidden_size": "emb_dim"}

    def __init__(
        self,
        vocab_size: int | None = None,
        emb_dim: int | None = None,
        inner_dim: int = 0,
        n_predict: int = 3,
        top_k_tokens_per_head: list[int] | None = None,
        n_candidates: int = 5,
        tie_weights: bool = False,
        scale_input: bool = False,
        **kwargs,
    ) -> None:
        self.vocab_size = vocab_size
        self.emb_dim = emb_dim
        self.inner_dim = inner_dim
        self.n_predict = n_predict
        self.top_k_tokens_per_head = list(top_k_tokens_per_head) if top_k_tokens_per_head is not None else None
        self.n_candidates = n_candidates
        self.tie_weights = tie_weights
        self.scale_input = scale_input
        kwargs.setdefault("architectures", ["MLPSpeculatorPreTrainedModel"])
        super().__init__(**kwargs)

    @property
    def inner_size(self) -> int | None:
        """The speculator's width: ``inner_dim``, or ``emb_dim`` when ``inner_dim`` is 0."""
        return self.inner_dim or self.emb_dim
