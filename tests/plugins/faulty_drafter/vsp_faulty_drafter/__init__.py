"""Drafters that fail on purpose, for the fault-tolerance tests.

The checkpoint's ``config.json`` chooses the failure: ``"fault"`` is ``"raise"`` (the forward
raises), ``"exit"`` (the forward calls ``sys.exit``), ``"oov"`` (the forward returns ids >= vocab_size)
or ``"state"`` (the state-carry hook raises), from the ``"fault_at"``-th call on (1-based);
``"bool"`` (the forward returns a bool tensor as ids, from the first call). ``FaultyInitDrafter``
initialises its state from ``initial_seen()`` (API 2), which raises (``"init_raise"``) or has the
wrong shape (``"init_shape"``); ``FaultyMissingInitDrafter`` names an attribute its model lacks.
Until then the drafter proposes the
last token again (often accepted on the tiny target). ``hidden_size``/``vocab_size`` are left
out of the fixtures' configs: the shim fills them from the target.

``"shape"`` (ids of width 1), ``"wide"`` (logits over more tokens than the vocabulary) and
``"nan"`` (NaN logits) fail the start-up trial. ``FaultyImportDrafter`` and ``FaultyNoClassDrafter``
name a model class that cannot be imported; ``FaultyNoWeightsDrafter``'s
model has no ``load_weights``; ``FaultyNoHookDrafter`` declares state without a
state-carry hook; ``FaultyAuxDrafter`` reads target layer ids from a config key ``layer_ids``.

``ShadowLlama`` claims ``LlamaForCausalLM``, an architecture vLLM serves: installing this
plugin must change nothing for Llama targets or plain Llama drafts.
"""

from vllm_spec_plugins import Drafter, StateSpec, hookimpl

VLLM_SPEC_API = 2


def _state(init=0.0, **kw):
    return (StateSpec(name="seen", shape=(1,), dtype="int64", init=init, **kw),)


#: architecture -> (model class in this package, extra Drafter fields); every one has model_type vsp_faulty
#: (the architecture picks the drafter) and config class FaultyConfig
FAULTY = {
    "FaultyDrafter": ("model:FaultyDrafter", {"max_speculative_tokens": "num_heads"}),
    "FaultyStateDrafter": ("model:FaultyStateDrafter", {"state": _state(0, on_preempt="keep"),
                                                        "max_speculative_tokens": "num_heads"}),
    "FaultyInitDrafter": ("model:FaultyStateDrafter", {"state": _state("initial_seen"),
                                                       "max_speculative_tokens": "num_heads"}),
    "FaultyMissingInitDrafter": ("model:FaultyStateDrafter", {"state": _state("no_such_attribute"),
                                                              "max_speculative_tokens": "num_heads"}),
    "FaultyImportDrafter": ("no_such_module:FaultyDrafter", {}),
    "FaultyNoClassDrafter": ("model:NoSuchDrafter", {}),
    "FaultyNoWeightsDrafter": ("model:FaultyNoWeightsDrafter", {}),
    "FaultyNoHookDrafter": ("model:FaultyDrafter", {"state": _state()}),
    "FaultyAuxDrafter": ("model:FaultyDrafter", {"aux_layer_ids": "layer_ids"}),
}


@hookimpl
def vllm_spec_register_drafters(register):
    for arch, (model_class, extra) in FAULTY.items():
        register(Drafter(architectures=(arch,), model_type="vsp_faulty",
                         config_class="vsp_faulty_drafter.config:FaultyConfig",
                         model_class=f"vsp_faulty_drafter.{model_class}", **extra))
    register(Drafter(
        architectures=("LlamaForCausalLM",),
        model_class="vsp_faulty_drafter.model:FaultyDrafter",
    ))
