from transformers import PretrainedConfig


class MMProbeConfig(PretrainedConfig):
    model_type = "vsp_mm_probe"

    def __init__(self, hidden_size=None, vocab_size=None, num_heads=3, image_weight=1.0, **kwargs):
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.num_heads = num_heads
        self.image_weight = image_weight
        kwargs.setdefault("architectures", ["MMProbeDrafter"])
        super().__init__(**kwargs)
