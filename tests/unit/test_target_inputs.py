"""The API-3 sources of what the target was fed, filled from a step's runner tensors (runtime.core)."""

from __future__ import annotations

import torch

from vllm_spec_plugins import Source
from vllm_spec_plugins.runtime.core import DrafterRuntime
from vllm_spec_plugins.runtime.inputs import Binding


def _runtime(mrope_dims: int = 0, rows: int = 8) -> DrafterRuntime:
    rt = DrafterRuntime.__new__(DrafterRuntime)
    pos_shape = (mrope_dims,) if mrope_dims else ()
    rt.forward_bindings = [Binding("embeds", Source.TARGET_INPUTS_EMBEDS, None, (4,), "model"),
                           Binding("is_mm", Source.IS_MULTIMODAL, None, (), "bool"),
                           Binding("pos", Source.POSITIONS_ALL, None, pos_shape, "int64"),
                           Binding("nxt", Source.NEXT_POSITIONS, None, pos_shape, "int64")]
    rt.update_bindings = []
    rt.pool = None
    rt.buffers = {Source.TARGET_INPUTS_EMBEDS: torch.zeros(rows, 4), Source.IS_MULTIMODAL: torch.ones(rows, dtype=torch.bool),
                  Source.POSITIONS_ALL: torch.zeros(rows, *pos_shape, dtype=torch.int64),
                  Source.NEXT_POSITIONS: torch.zeros(rows, *pos_shape, dtype=torch.int64)}
    return rt


def test_embeddings_mask_and_plain_positions_come_row_for_row_from_the_step():
    rt = _runtime()
    embeds = torch.arange(40, dtype=torch.float32).view(10, 4)  # the runner's buffer, longer than the step
    mask = torch.tensor([False, True, True, False, False])
    rt._step = {"inputs_embeds": embeds, "is_multimodal": mask}
    positions = torch.tensor([0, 1, 2, 3, 7])  # request 0: tokens 0-3; request 1: one decode token at 7
    rt._prepare_step(2, 5, torch.zeros(2, dtype=torch.int32), positions, torch.tensor([3, 4]))
    b = rt.buffers
    assert torch.equal(b[Source.TARGET_INPUTS_EMBEDS][:5], embeds[:5])
    assert torch.equal(b[Source.IS_MULTIMODAL][:5], mask)
    assert torch.equal(b[Source.POSITIONS_ALL][:5], positions)
    assert b[Source.NEXT_POSITIONS][:2].tolist() == [4, 8]


def test_no_mask_this_step_is_all_false_not_the_last_steps():
    rt = _runtime()
    rt._step = {"inputs_embeds": torch.zeros(3, 4), "is_multimodal": None}
    rt._prepare_step(1, 3, torch.zeros(1, dtype=torch.int32), torch.arange(3), torch.tensor([2]))
    assert not rt.buffers[Source.IS_MULTIMODAL][:3].any()


def test_mrope_positions_are_rows_per_token_and_the_next_one_is_past_the_largest_section():
    rt = _runtime(mrope_dims=3)
    # request 0 ends in an image token at (t, h, w) = (4, 5, 6); request 1 in a text token at (9, 9, 9)
    mrope = torch.tensor([[3, 4, 9], [3, 5, 9], [3, 6, 9]])  # [sections, tokens], as vLLM keeps them
    rt._step = {"inputs_embeds": torch.zeros(3, 4), "is_multimodal": None, "mrope_positions": mrope}
    rt._prepare_step(2, 3, torch.zeros(2, dtype=torch.int32), torch.tensor([3, 4, 9]), torch.tensor([1, 2]))
    assert rt.buffers[Source.POSITIONS_ALL][:3].tolist() == [[3, 3, 3], [4, 5, 6], [9, 9, 9]]
    assert rt.buffers[Source.NEXT_POSITIONS][:2].tolist() == [[7, 7, 7], [10, 10, 10]]
