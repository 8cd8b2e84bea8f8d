from transformers import PretrainedConfig


class CompatRecurrentConfig(PretrainedConfig):
    model_type = "vsp_compat_rnn"

    def __init__(self, hidden_size=None, vocab_size=None, num_heads=4, **kwargs):
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.num_heads = num_heads
        kwargs.setdefault("architectures", ["CompatRecurrentDrafter"])
        super().__init__(**kwargs)
