from transformers import PretrainedConfig


class StateTestConfig(PretrainedConfig):
    model_type = "vsp_state_test"

    def __init__(self, hidden_size=None, vocab_size=None, num_heads=4, **kwargs):
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.num_heads = num_heads
        kwargs.setdefault("architectures", ["StateTestDrafter"])
        super().__init__(**kwargs)
