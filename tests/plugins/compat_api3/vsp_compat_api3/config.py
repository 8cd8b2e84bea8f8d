from transformers import PretrainedConfig


class CompatHeadsConfig(PretrainedConfig):
    model_type = "vsp_compat_heads"

    def __init__(self, hidden_size=None, vocab_size=None, num_heads=4, **kwargs):
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.num_heads = num_heads
        kwargs.setdefault("architectures", ["CompatHeadsDrafter"])
        super().__init__(**kwargs)
