from transformers import PretrainedConfig


class CompatGruConfig(PretrainedConfig):
    model_type = "vsp_compat_gru"

    def __init__(self, hidden_size=None, vocab_size=None, embed_size=32, num_heads=4, **kwargs):
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.embed_size = embed_size
        self.num_heads = num_heads
        kwargs.setdefault("architectures", ["CompatGruDrafter"])
        super().__init__(**kwargs)
