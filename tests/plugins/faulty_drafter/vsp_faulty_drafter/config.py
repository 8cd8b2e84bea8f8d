from transformers import PretrainedConfig


class FaultyConfig(PretrainedConfig):
    model_type = "vsp_faulty"

    def __init__(self, hidden_size=None, vocab_size=None, num_heads=3, fault="none", fault_at=1, **kwargs):
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.num_heads = num_heads
        self.fault = fault
        self.fault_at = fault_at
        kwargs.setdefault("architectures", ["FaultyDrafter"])
        super().__init__(**kwargs)
