"""Skipping an attention drafter's first pass while its batch drafts nothing, and catching up before it drafts.

vLLM's EAGLE loop runs the draft model's first pass over every token the target consumed, also in a
step that drafts nothing (``k = 0``): that pass writes the draft's KV cache for those positions, which later
drafts attend to. On SmolLM2-135M (2 CPU cores) it made a ``k = 0`` step cost 5-9 % of the target's forward
more than a step without speculation (``python -m bench.floor``, docs/benchmarks.md).

Instead, in a step where the whole batch drafts nothing and every request has one token (a plain decode
step), both front ends (:mod:`.proposer` on V1, :mod:`.mrv2` on Model Runner V2, through
:class:`~.core.AttentionRuntime`) keep what the first pass would have consumed for each request (the input
token, its position, its KV slot and the target's hidden state, before ``combine_hidden_states``) and return no
drafts at once. Before any step that runs the first pass (drafting resumes, a prefill joins the batch, or a
request has kept its limit of rows), they replay the kept rows of that step's requests, request by request as a
chunk of a prefill, which writes the same draft KV the skipped passes would have. Nothing is synchronised with
the host: the kept rows are copied on the device, and their bookkeeping (which request holds which rows, how
many) is host-side, derived from the step's scheduled requests.

With synchronous scheduling (both runners), a step whose model drafts nothing but which verifies drafts is skipped too
(prompt lookup's, beside an attention drafter whose ``k`` the policy put at 0; or the model's own, drafted in the
step before its ``k`` fell to 0): each request keeps every row it verified, and the rows past its first rejected
draft are trimmed once the host knows how many were accepted, from the request's position at the next step it is
scheduled in (:meth:`KeptRows.settle`). The trimmed rows' KV slots are written again by the tokens that really
hold those positions, as vLLM's own first pass over rejected drafts leaves them to be.

``VLLM_SPEC_PLUGINS_DRAFT_CATCHUP`` sets the rows kept per request (default 16; memory: ``max_num_seqs * rows``
rows of the target's hidden states fed to the drafter); ``0`` turns skipping off (the first pass runs every
step, vLLM's own behaviour).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from .._env import env_flag
from .state import IndexStaging

ENV_CATCHUP = "VLLM_SPEC_PLUGINS_DRAFT_CATCHUP"
DEFAULT_ROWS = 16
ENV_KV_ONLY = "VLLM_SPEC_PLUGINS_KV_ONLY"


def kv_only_enabled(env: dict[str, str] | None = None) -> bool:
    """``VLLM_SPEC_PLUGINS_KV_ONLY``: whether a forward taking ``kv_only`` (API 4) is told so in the passes whose
    outputs are discarded (unset or empty: yes; ``0``: never, the whole forward runs there).

    Raises:
        ValueError: not a true/false value, naming the variable.
    """
    raw = (os.environ if env is None else env).get(ENV_KV_ONLY)
    return raw is None or not raw.strip() or env_flag(ENV_KV_ONLY, env)


def catchup_rows(env: dict[str, str] | None = None) -> int:
    """Rows kept per request from ``VLLM_SPEC_PLUGINS_DRAFT_CATCHUP`` (unset: :data:`DEFAULT_ROWS`; 0: off).

    Raises:
        ValueError: not a whole number from 0 to 4096, naming the variable.
    """
    raw = (os.environ if env is None else env).get(ENV_CATCHUP)
    if raw is None or not raw.strip():
        return DEFAULT_ROWS
    try:
        rows = int(raw.strip())
    except ValueError:
        rows = -1
    if not 0 <= rows <= 4096:
        raise ValueError(f"vllm_spec_plugins: {ENV_CATCHUP}={raw!r} is not a whole number from 0 to 4096: it is "
                         f"how many skipped first-pass rows an attention drafter keeps per request (default "
                         f"{DEFAULT_ROWS}; 0 runs the draft's first pass every step)")
    return rows


@dataclass
class Taken:
    """Rows handed back for a catch-up pass: per request (in the step's batch order) its batch row and count,
    and the flat index of its rows in the kept buffers, request after request."""

    batch_rows: list[int]
    counts: list[int]
    index: torch.Tensor


class KeptRows:
    """Per-request rows of skipped first passes, in static device buffers allocated once.

    Request ``r`` holds a slot of :attr:`rows` consecutive rows; a skipped step appends its rows of that step
    (one in a plain decode step). Host bookkeeping only: ``where[req_id] = [slot, count]``, and for rows kept
    from a step that verified drafts, ``pending[req_id] = (count before, position of the first row, rows)`` until
    :meth:`settle` trims them to the accepted ones.
    """

    def __init__(self, max_reqs: int, rows: int, width: int, dtype: torch.dtype, device: torch.device,
                 token_dtype: torch.dtype = torch.int32) -> None:
        self.rows = rows
        n = max_reqs * rows
        self.token_ids = torch.zeros(n, dtype=token_dtype, device=device)
        self.positions = torch.zeros(n, dtype=torch.int64, device=device)
        self.slots = torch.zeros(n, dtype=torch.int64, device=device)
        self.hidden = torch.zeros((n, width), dtype=dtype, device=device)
        self._to_device = IndexStaging(n, device)  # the rows' flat index, copied without a host sync
        self.where: dict[str, list[int]] = {}
        self.pending: dict[str, tuple[int, int, int]] = {}
        self._free = list(range(max_reqs - 1, -1, -1))

    def __len__(self) -> int:
        return len(self.where)

    def can_keep(self, req_ids: list[str], counts: list[int] | None = None) -> bool:
        """Whether ``counts[i]`` more rows (one each by default) of each of these requests fit (a request at its
        limit must be caught up)."""
        new = 0
        for i, rid in enumerate(req_ids):
            n = 1 if counts is None else counts[i]
            held = self.where.get(rid)
            if held is None:
                new += 1
                if n > self.rows:
                    return False
            elif held[1] + n > self.rows:
                return False
        return new <= len(self._free)

    def keep(self, req_ids: list[str], token_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
             hidden: torch.Tensor, counts: list[int] | None = None, first_positions: list[int] | None = None
             ) -> None:
        """Append rows: ``counts[i]`` rows of request ``req_ids[i]`` (one each by default), request after request
        in the tensors. With ``first_positions`` (the host's position of each request's first row this step),
        the rows of a request with more than one are pending: :meth:`settle` keeps those up to the last accepted
        one. Call :meth:`can_keep` first."""
        flat: list[int] = []
        for i, rid in enumerate(req_ids):
            n = 1 if counts is None else counts[i]
            held = self.where.get(rid)
            if held is None:
                held = self.where[rid] = [self._free.pop(), 0]
            start = held[0] * self.rows + held[1]
            flat.extend(range(start, start + n))
            if first_positions is not None and n > 1:
                self.pending[rid] = (held[1], int(first_positions[i]), n)
            held[1] += n
        idx = self._to_device(flat)
        self.token_ids.index_copy_(0, idx, token_ids.to(self.token_ids.dtype))
        self.positions.index_copy_(0, idx, positions.to(torch.int64))
        self.slots.index_copy_(0, idx, slots.to(torch.int64))
        self.hidden.index_copy_(0, idx, hidden.to(self.hidden.dtype))

    def settle(self, req_ids: list[str], positions: list[int]) -> int:
        """Trim the pending rows of these requests, given each one's position now (the host's count of its
        computed tokens at a later step: its first row verified, the drafts accepted, and nothing of the rest).
        Returns the rows trimmed."""
        trimmed = 0
        for rid, pos in zip(req_ids, positions, strict=True):
            pend = self.pending.pop(rid, None)
            held = self.where.get(rid)
            if pend is None or held is None:
                continue
            before, first, n = pend
            valid = max(1, min(n, int(pos) - first))
            trimmed += n - valid
            held[1] = before + valid
        return trimmed

    def take(self, req_ids: list[str]) -> Taken | None:
        """Hand back (and forget) the rows of those of ``req_ids`` (the step's batch, in order) that hold any.
        Pending rows must have been settled."""
        batch_rows: list[int] = []
        counts: list[int] = []
        flat: list[int] = []
        for row, rid in enumerate(req_ids):
            if rid in self.pending:
                raise RuntimeError(f"vllm_spec_plugins: the kept first-pass rows of request {rid!r} were not "
                                   f"trimmed to its accepted drafts before a catch-up (KeptRows.settle)")
            held = self.where.pop(rid, None)
            if held is None:
                continue
            slot, count = held
            self._free.append(slot)
            batch_rows.append(row)
            counts.append(count)
            flat.extend(range(slot * self.rows, slot * self.rows + count))
        if not batch_rows:
            return None
        return Taken(batch_rows, counts, self._to_device(flat))

    def drop(self, req_id: str) -> None:
        """Forget a request's rows: it finished, or was preempted (its KV blocks are freed and re-filled by the
        prefill it resumes with, first pass included)."""
        self.pending.pop(req_id, None)
        held = self.where.pop(req_id, None)
        if held is not None:
            self._free.append(held[0])
