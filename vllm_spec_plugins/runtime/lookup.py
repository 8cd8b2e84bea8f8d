"""Prompt lookup beside a plugin drafter: n-gram drafts where the text repeats itself, per request.

A model draft predicts the next tokens from the target's hidden states; prompt lookup (vLLM's ``ngram``
method) copies them from earlier in the same request, where its last ``n`` tokens appeared before. The two are
right on different text: lookup on code, quotes, lists and edits of the prompt, the model on free text. With
lookup on (by default where the adaptive policy chooses ``k`` with synchronous scheduling: :func:`lookup_config`,
:func:`auto_off_reason`), every step drafts both ways and each request takes one:

* the **lookup** draft where the request's last ``n`` tokens (``n`` from the largest to the smallest of the
  range, longest match first) occur earlier in its own tokens (the most recent occurrence), and its lookup drafts
  have been accepted at least as often as its model drafts (a running average per request, from the accepted
  counts vLLM reports; both start equal, so a match is taken first);
* the **model** draft otherwise; in a step whose model drafts nothing (where the adaptive policy verifies only
  the lookup's drafts: the model's ``k`` is 0 there), the lookup's wherever it found a match. A request whose lookup
  fell behind its model would otherwise draft nothing, and its rates, which move only with drafts verified, would
  keep it so for as long as the model's ``k`` stays 0.

The lookup continues the sequence after the match; where the match is so recent that its continuation runs
into the tokens being drafted, it repeats with the match's period (``the the the``: ``the``). Every draft is
verified by the target as any other: greedy output is unchanged, and for sampled requests both drafts are
deterministic proposals, which vLLM's rejection sampler verifies without draft probabilities.

Everything runs on the device with static shapes and no host sync: each request's tokens are kept in a device
table ``[requests, max_model_len]`` (int32), written each step from the scheduled tokens at their positions and
the next token at its position; a new request's row is filled from its prompt once, so tokens served from the
prefix cache are there too. The search is one comparison per token of the table per ``n`` (``max_model_len``
columns per request).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..policy import SOURCE_LOOKUP, SOURCE_MODEL
from .state import IndexStaging, StatePool, token_requests

ENV_LOOKUP = "VLLM_SPEC_PLUGINS_PROMPT_LOOKUP"
DEFAULT_RANGE = (2, 4)
MAX_NGRAM = 16
#: weight of the latest step in a request's running acceptance rate of each draft source
RATE_WEIGHT = 0.3
#: a request's draft source, as the trace records it and the adaptive policy is told (the policy's constants)
MODEL, LOOKUP = SOURCE_MODEL, SOURCE_LOOKUP


#: ``auto`` turns lookup off where its token table (:meth:`PromptLookup.table_bytes`) would take more than this; its
#: search reads every column of a drafting request's row in every step that drafts, so the cap bounds that too
#: (512 MiB: 256 sequences of 128k tokens fit, or 1024 of 32k; 1024 of 128k, 1 GiB, do not).
AUTO_MAX_TABLE_BYTES = 512 << 20


@dataclass(frozen=True)
class LookupConfig:
    min_n: int
    max_n: int
    #: chosen by default (the variable unset or ``auto``), not asked for: where lookup cannot serve the engine, or
    #: is not known to pay there, it stays off instead of refusing to start
    auto: bool = False

    def __str__(self) -> str:
        return "auto" if self.auto else f"{self.min_n}:{self.max_n}"


def lookup_config(env: dict[str, str] | None = None) -> LookupConfig | None:
    """``VLLM_SPEC_PLUGINS_PROMPT_LOOKUP``: unset, empty or ``auto``: n-grams of 2 to 4 tokens where the engine
    runs the adaptive policy with synchronous scheduling (:func:`auto_off_reason`); ``0`` or ``off``: no lookup;
    ``on``: n-grams of 2 to 4 tokens; ``MIN:MAX`` (``1 <= MIN <= MAX <= 16``): of MIN to MAX tokens.

    Raises:
        ValueError: any other value, naming the variable and what it takes.
    """
    raw = (os.environ if env is None else env).get(ENV_LOOKUP)
    value = (raw or "").strip().lower()
    if value in ("", "auto"):
        return LookupConfig(*DEFAULT_RANGE, auto=True)
    if value in ("0", "off"):
        return None
    if value == "on":
        return LookupConfig(*DEFAULT_RANGE)
    lo, sep, hi = value.partition(":")
    try:
        cfg = LookupConfig(int(lo), int(hi)) if sep else None
    except ValueError:
        cfg = None
    if cfg is None or not 1 <= cfg.min_n <= cfg.max_n <= MAX_NGRAM:
        raise ValueError(f"vllm_spec_plugins: {ENV_LOOKUP}={raw!r} is neither 'auto', 'on', 'off' nor MIN:MAX with "
                         f"1 <= MIN <= MAX <= {MAX_NGRAM}: it turns on prompt-lookup (n-gram) drafts beside the "
                         f"plugin's, from n-grams of MIN to MAX tokens ('on' = {DEFAULT_RANGE[0]}:{DEFAULT_RANGE[1]})")
    return cfg


def auto_off_reason(not_adaptive: str | None, async_scheduling: bool, table_bytes: int) -> str | None:
    """Why ``auto`` leaves lookup off in an engine that could run it, or ``None`` to turn it on.

    Lookup pays beside a model draft where each source is verified at its own ``k``: the adaptive policy does that
    (``not_adaptive``: why it will not choose ``k`` here, :func:`~vllm_spec_plugins.policy.not_adaptive`), and
    only with synchronous scheduling, where the runner hands each request's source to the scheduler (with async
    scheduling no source reaches it and the lookup's drafts would be verified at the model's ``k``, never measured).
    And its table must fit :data:`AUTO_MAX_TABLE_BYTES`."""
    if not_adaptive is not None:
        return (f"the adaptive policy does not choose k here ({not_adaptive}), and only it verifies the lookup's "
                f"drafts at a k of their own")
    if async_scheduling:
        return ("async scheduling is on: the scheduler does not learn which requests' drafts are the lookup's, so "
                "they would be verified at the model's k (not measured to pay)")
    if table_bytes > AUTO_MAX_TABLE_BYTES:
        return (f"its token table would take {table_bytes / 2**20:.0f} MiB (2 x max_num_seqs + 1 rows of "
                f"max_model_len int32), "
                f"more than the {AUTO_MAX_TABLE_BYTES >> 20} MiB auto allows; a smaller max_model_len or max_num_seqs "
                f"fits")
    return None


def lookup_drafts(ctx: torch.Tensor, n: torch.Tensor, k: int, min_n: int, max_n: int
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompt-lookup drafts for each row of ``ctx`` (``[B, L]`` token ids, of which the first ``n[b]`` are the
    request's sequence; the rest is ignored).

    For ``g`` from ``max_n`` down to ``min_n``: the last ``g`` tokens, matched at the latest start ``j`` with
    ``j + g < n`` (at least one token after the match). The first (longest) ``g`` that matches wins. Draft ``c``
    is ``ctx[j + g + c mod d]``, ``d = n - g - j``: the continuation, repeated with the match's period where it
    reaches the end of the sequence. Returns ``(drafts [B, k] int64, found [B] bool)``; rows without a match
    get zeros. Static shapes, no host sync.
    """
    B, L = ctx.shape
    dev = ctx.device
    n = n.to(torch.int64)
    cols = torch.arange(L, device=dev)
    start = torch.full((B,), -1, dtype=torch.int64, device=dev)  # j + g of the winning match, -1: none yet
    period = torch.ones(B, dtype=torch.int64, device=dev)
    for g in range(min(max_n, L - 1), min_n - 1, -1):
        W = L - g
        suffix = ctx.gather(1, (n.unsqueeze(1) - g + torch.arange(g, device=dev)).clamp_(0, L - 1))
        hit = cols[:W].unsqueeze(0) < (n - g).unsqueeze(1)  # j + g < n (and n > g: a whole suffix)
        for i in range(g):
            hit &= ctx[:, i:i + W] == suffix[:, i:i + 1]
        j = torch.where(hit, cols[:W].unsqueeze(0), -1).amax(1)
        new = (j >= 0) & (start < 0)
        start = torch.where(new, j + g, start)
        period = torch.where(new, n - start, period)
    found = start >= 0
    offs = torch.arange(k, device=dev).unsqueeze(0) % period.clamp(min=1).unsqueeze(1)
    drafts = ctx.gather(1, (start.clamp(min=0).unsqueeze(1) + offs).clamp_(max=L - 1)).to(torch.int64)
    return torch.where(found.unsqueeze(1), drafts, torch.zeros_like(drafts)), found


def reference_lookup(seq: list[int], k: int, min_n: int, max_n: int) -> list[int] | None:
    """:func:`lookup_drafts` for one sequence in plain Python (the tests' and the docs' definition)."""
    n = len(seq)
    for g in range(max_n, min_n - 1, -1):
        if n <= g:
            continue
        suffix = seq[n - g:]
        for j in range(n - g - 1, -1, -1):
            if seq[j:j + g] == suffix:
                start, period = j + g, n - g - j
                return [seq[start + c % period] for c in range(k)]
    return None


class PromptLookup:
    """Per-request token tables, running acceptance rates, and the per-request choice of draft.

    Rows are keyed by request id (a :class:`~.state.StatePool`, as carried state): allocated when a request is
    first seen (its row filled from its prompt), kept across preemption, freed when it finishes."""

    def __init__(self, cfg: LookupConfig, requests: int, max_len: int, max_tokens: int,
                 device: torch.device) -> None:
        self.cfg = cfg
        self.max_len = max_len
        self.pool = StatePool([
            ("tokens", (max_len,), torch.int32, 0.0, "keep"),
            # running acceptance rate (accepted / drafted) of [model, lookup] drafts
            ("rate", (2,), torch.float32, 0.5, "keep"),
            # which source drafted the drafts now being verified (0: none), and how many
            ("source", (), torch.int64, 0.0, "keep"),
            ("drafted", (), torch.int64, 0.0, "keep"),
        ], 2 * requests, device)
        self.token_index = torch.arange(max(max_tokens, 1), device=device)
        self._rows = IndexStaging(requests, device)
        #: the last step's choice per batch row (the trace's): 1 model, 2 lookup; None: no drafts
        self.chosen: torch.Tensor | None = None
        #: the rates that choice compared, ``[B, 2]`` (model, lookup)
        self.rates: torch.Tensor | None = None
        #: per batch row, the drafts the last observed step verified (0: none, or a prefill)
        self.verified: torch.Tensor | None = None

    @staticmethod
    def table_bytes(requests: int, max_len: int) -> int:
        """What the token table of ``requests`` scheduled at once takes: ``max_len`` int32 columns, a row for twice
        as many requests (kept across preemption) and a spare (the pool's)."""
        return (2 * requests + 1) * max_len * 4

    def rows(self, req_ids: list[str], prompt: Callable[[str], torch.Tensor | None]) -> torch.Tensor:
        """The table row of each request on the device; a request seen first gets ``prompt(req_id)`` (its tokens
        so far, on any device, or ``None``) written at the start of its row."""
        pool = self.pool
        new = [r for r in req_ids if r not in pool.slot_of]
        slots = pool.slots_for(req_ids)
        for r in new:
            tokens = prompt(r)
            if tokens is not None and tokens.numel():
                n = min(int(tokens.numel()), self.max_len)
                pool.tensors["tokens"][pool.slot_of[r], :n].copy_(tokens.reshape(-1)[:n], non_blocking=True)
        return self._rows(slots)

    def release(self, req_id: str) -> None:
        self.pool.release(req_id)

    def observe(self, rows: torch.Tensor, B: int, T: int, token_ids: torch.Tensor, positions: torch.Tensor,
                query_start_loc: torch.Tensor, next_ids: torch.Tensor, next_pos: torch.Tensor,
                produced: torch.Tensor) -> None:
        """Every step (whatever k): write the scheduled tokens at their positions and each request's next token
        at its position into the request's row ``rows[b]``, then fold the accepted count of the drafts this
        step verified into the rate of the source that drafted them (``produced``: tokens each request
        produced this step, accepted drafts + 1, 0 for a partial prefill), over the drafts the step verified (its
        scheduled tokens less one: the scheduler may have cut them), not those drafted."""
        t = self.pool.tensors
        last = self.max_len - 1
        token_rows = rows[token_requests(query_start_loc, self.token_index, B, T)]
        t["tokens"].index_put_((token_rows, positions[:T].to(torch.int64).clamp(0, last)),
                               token_ids[:T].to(torch.int32))
        t["tokens"].index_put_((rows, next_pos[:B].to(torch.int64).clamp(0, last)), next_ids[:B].to(torch.int32))
        produced = produced[:B].to(torch.int64)
        src, drafted = t["source"][rows], t["drafted"][rows]
        # drafts verified: the request's scheduled tokens less its one decoded token. The scheduler may verify
        # fewer than were drafted (the policy cuts a request's drafts); more means a prefill, which verifies none.
        qlen = (query_start_loc[1:B + 1] - query_start_loc[:B]).to(torch.int64) - 1
        drafted = torch.where(qlen <= drafted, qlen, 0)
        self.verified = drafted
        verified = (src > 0) & (drafted > 0) & (produced > 0)
        accepted = ((produced - 1).clamp(min=0).to(torch.float32) / drafted.clamp(min=1)).clamp(max=1)
        col = (src - 1).clamp(min=0)
        old = t["rate"][rows, col]
        t["rate"][rows, col] = torch.where(verified, (1 - RATE_WEIGHT) * old + RATE_WEIGHT * accepted, old)
        t["source"][rows] = torch.where(produced > 0, 0, src)  # verified, or nothing was drafted

    def compose(self, rows: torch.Tensor, drafts: torch.Tensor, next_pos: torch.Tensor,
                model_k: int | None = None) -> torch.Tensor:
        """The step's drafts ``[B, k]``: per request, the lookup's where it found a match and they are expected to
        yield at least as many accepted tokens as the model's, else the model's (``drafts``).

        ``model_k``: how many of the ``k`` the model drafted (``None``: all). Expected accepted tokens are a
        request's running acceptance rate of a source times the drafts that source fills: ``k`` for the lookup
        (where the policy raised ``k`` past ``model_k``, for the lookup's drafts), ``model_k`` for the model. With
        ``model_k == k`` that is the rates compared; at 0 (the model drafted none: a request that took the model's
        would verify nothing) every request with a match takes the lookup's."""
        B, k = drafts.shape[0], drafts.shape[1]
        if k == 0 or B == 0:
            self.chosen = self.rates = None
            return drafts
        t = self.pool.tensors
        n = (next_pos[:B].to(torch.int64) + 1).clamp(max=self.max_len)
        ld, found = lookup_drafts(t["tokens"][rows], n, k, self.cfg.min_n, self.cfg.max_n)
        rate = self.rates = t["rate"][rows]
        # (model_k is the policy's, on the host: no sync either way)
        mk = k if model_k is None else model_k
        use = found & (rate[:, 1] >= rate[:, 0] if mk == k else rate[:, 1] * k >= rate[:, 0] * mk)
        self.chosen = torch.where(use, LOOKUP, MODEL)
        t["source"][rows] = self.chosen
        t["drafted"].index_fill_(0, rows, k)  # (a Python number assigned by index is copied to the device: a sync)
        return torch.where(use.unsqueeze(1), ld.to(drafts.dtype), drafts)
