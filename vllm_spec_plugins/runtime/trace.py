"""The debugging trace (``VLLM_SPEC_PLUGINS_TRACE_DIR``): one file per drafting step.

Schema (version :data:`TRACE_SCHEMA`; documented in docs/trace.md). Every value is a tensor,
a str, an int, a bool, ``None``, or a list/dict of those, so a record loads with
``torch.load(path, weights_only=True)``. Torch only, no vLLM import: the test kit reads it.
"""

from __future__ import annotations

import os
from typing import Any

import torch

TRACE_SCHEMA = 9
"""1: the first format (forward inputs, drafts, request ids, valid counts). 2: adds ``schema``, ``step``,
``plugin``, ``inputs``, ``sampled_token_ids``, ``state``, ``hook_inputs`` and ``hook_outputs``. 3: adds
``num_drafts`` and ``forward_columns`` (heads drafters). 4: adds ``first_pass`` and ``caught_up`` (attention
drafters). 5: adds ``lookup`` (prompt lookup on, in a step with drafts: per request, 2 where its drafts are the
lookup's, 1 the plugin's), ``lookup_next_positions`` (the position of each request's next token) and
``lookup_rates`` (``[B, 2]``: the running acceptance rates of the request's model and lookup drafts that the
choice compared). 6: adds ``lookup_verified`` (prompt lookup on: the drafts each request verified in the
step, which its rate counts) and ``lookup_model_k`` (how many of the step's drafts the plugin's model drafted).
7: adds ``trimmed`` (attention drafters: rows kept from skipped first passes of steps that verified drafts, found
rejected at this step and dropped before any catch-up). 8: adds ``kv_only`` (attention drafters: the passes of the
step whose forward was told ``kv_only=True``, API 4). 9: ``drafts`` is again what the plugin's model drafted
(``[num_reqs, k]``, ``k`` the drafts its forward was asked for: with prompt lookup on, ``lookup_model_k``), as in
schemas 1-4, and the new ``returned_drafts`` is what was returned to vLLM (prompt lookup's drafts in place of the
model's where a request took them; the step's whole ``k``); ``num_drafts`` is the value the forward was passed and
``forward_columns`` is ``None`` where the forward did not run (schemas 5-8 wrote the returned drafts under
``drafts``, the step's ``k`` under ``num_drafts``, and the last forward's columns in steps whose model drafted
nothing)."""


def copy_tensors(d: dict[str, Any]) -> dict[str, Any]:
    """CPU copies of the tensors of ``d`` (other values as they are)."""
    return {k: (v.detach().cpu().clone() if isinstance(v, torch.Tensor) else v) for k, v in d.items()}


def build_record(p: Any, B: int, T: int, drafts: torch.Tensor,
                 extra: dict[str, Any] | None = None, model_drafts: torch.Tensor | None = None) -> dict[str, Any]:
    """The record of one drafting step of plugin proposer ``p`` (``B`` requests, ``T`` scheduled tokens).

    ``drafts``: what the step returned to vLLM (``returned_drafts``); ``model_drafts``: what the plugin's model
    drafted (``drafts``), ``None`` where they are the same (no prompt lookup composed them)."""
    model = drafts if model_drafts is None else model_drafts
    step = p._step
    d = p.drafter
    inputs = {b.param: p.buffers[b.key][: T if b.source.rows == "token" else B]
              for b in p.forward_bindings if b.source is not None}
    sampled = step.get("sampled_token_ids")
    hook = getattr(p, "_trace_hook", None) or {}
    record: dict[str, Any] = {
        "schema": TRACE_SCHEMA,
        "step": int(p._trace_n),
        "plugin": d.plugin,
        "distribution": d.display_dist,
        "kind": d.kind,
        "req_ids": [str(r) for r in step.get("req_ids", [])[:B]],
        "drafts": model.detach().cpu().clone(),
        "returned_drafts": drafts.detach().cpu().clone(),
        "valid_count": step["valid_count"][:B].detach().cpu().clone(),
        "sampled_token_ids": None if sampled is None else _padded(sampled[:B], getattr(p, "num_speculative_tokens", 0)),
        "live_state_slots": len(p.pool) if p.pool is not None else None,
        "inputs": copy_tensors(inputs),
        "state": ({name: p.buffers[("state", name)][:B].detach().cpu().clone() for name in p.pool.tensors}
                  if p.pool is not None else {}),
        "hook_inputs": hook.get("hook_inputs", {}),
        "hook_outputs": hook.get("hook_outputs", {}),
        # the forward ran where the model drafted (the core keeps exactly the num_drafts columns it asked for)
        "num_drafts": int(model.shape[1]) if getattr(p, "takes_num_drafts", False) and model.shape[1] else None,
        "forward_columns": (getattr(p, "_forward_columns", None) if d.kind == "heads" and model.shape[1] else None),
        "first_pass": step.get("first_pass") if d.kind == "attention" else None,
        "caught_up": int(step.get("caught_up", 0)) if d.kind == "attention" else None,
        "trimmed": int(step.get("trimmed", 0)) if d.kind == "attention" else None,
        "kv_only": int(step.get("kv_only", 0)) if d.kind == "attention" else None,
        "lookup": (None if getattr(p, "lookup", None) is None or p.lookup.chosen is None
                   else p.lookup.chosen[:B].detach().cpu().clone()),
        "lookup_next_positions": (None if step.get("lookup") is None
                                  else step["lookup"][1][:B].detach().cpu().clone()),
        "lookup_model_k": (None if getattr(p, "lookup", None) is None or p.lookup.chosen is None
                           else step.get("drafted_by_model")),
        "lookup_verified": (None if getattr(p, "lookup", None) is None or p.lookup.verified is None
                            else p.lookup.verified[:B].detach().cpu().clone()),
        "lookup_rates": (None if getattr(p, "lookup", None) is None or p.lookup.rates is None
                         else p.lookup.rates[:B].detach().cpu().clone()),
    }
    for name, value in record["inputs"].items():  # schema 1: forward inputs at the top level, by parameter
        record.setdefault(name, value)
    for name, value in (extra or {}).items():
        record.setdefault(name, copy_tensors({name: value})[name])
    return record


def _padded(sampled: torch.Tensor, k: int) -> torch.Tensor:
    """``[num_reqs, K + 1]``, -1 where nothing was produced (vLLM passes ``[num_reqs, 1]`` in steps without drafts)."""
    out = torch.full((sampled.shape[0], max(k + 1, sampled.shape[1])), -1, dtype=sampled.dtype)
    out[:, : sampled.shape[1]] = sampled.detach().cpu()
    return out


def save_record(p: Any, B: int, T: int, drafts: torch.Tensor, extra: dict[str, Any] | None = None,
                model_drafts: torch.Tensor | None = None) -> str:
    record = build_record(p, B, T, drafts, extra, model_drafts)
    p._trace_hook = None
    os.makedirs(p._trace_dir, exist_ok=True)
    rank = getattr(p.vllm_config.parallel_config, "rank", 0)
    path = os.path.join(p._trace_dir, f"r{rank}-p{os.getpid()}-{p._trace_n:06d}.pt")
    torch.save(record, path)
    return path


def load_trace(trace_dir: str | os.PathLike[str], rank: int | None = 0) -> list[dict[str, Any]]:
    """Every record under ``trace_dir`` (of ``rank``; ``None``: all ranks) in file order (process, then
    step), loaded with ``weights_only=True``."""
    import glob

    pattern = f"r{rank}-*.pt" if rank is not None else "r*-*.pt"
    files = sorted(glob.glob(os.path.join(str(trace_dir), pattern)))
    return [torch.load(f, weights_only=True) for f in files]


def base_request_id(req_id: str) -> str:
    """The id a request was added with: vLLM appends ``-<random suffix>`` to it internally."""
    return req_id.rsplit("-", 1)[0] if "-" in req_id else req_id
