from transformers import PretrainedConfig


class OracleTestConfig(PretrainedConfig):
    model_type = "vsp_oracle_test"

    def __init__(self, hidden_size=None, vocab_size=None, num_heads=4, max_positions=256, burn=0, **kwargs):
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.num_heads = num_heads
        self.max_positions = max_positions
        self.burn = burn
        kwargs.setdefault("architectures", ["OracleTestDrafter"])
        super().__init__(**kwargs)
