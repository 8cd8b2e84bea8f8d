from transformers import PretrainedConfig


class RecurrentTestConfig(PretrainedConfig):
    model_type = "vsp_recurrent_test"

    def __init__(self, hidden_size=None, vocab_size=None, num_heads=4, **kwargs):
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.num_heads = num_heads
        kwargs.setdefault("architectures", ["RecurrentTestDrafter"])
        super().__init__(**kwargs)
