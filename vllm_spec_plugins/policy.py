"""The adaptive drafting policy: how many draft tokens to verify at each step, from what it measures.

Pure Python (no torch, no vLLM): the scheduler patch (:mod:`vllm_spec_plugins.patch.scheduler`)
feeds it what vLLM's scheduler already knows on the host, and asks it for ``k`` once per step.

Model. For a batch of ``b`` requests, drafting ``k`` tokens per request yields on average
``E(k) = 1 + a1 + a1*a2 + ... + a1*...*ak`` tokens per request per step, where ``aj`` is the
probability that draft position ``j`` is accepted once positions ``1..j-1`` were. A step
that verifies (and drafts) ``k`` tokens per request costs ``t(b, k)`` seconds, measured. The
policy picks ``argmax_k E(k) / t(b, k)`` over ``k = 0..K``: ``k = 0`` is a plain decode step.
Where requests whose drafts keep failing are not verified (``request_k``), a step at ``k``
verifies only a fraction ``u(b, k)`` of the batch, measured with its cost: it yields
``1 + u * (E(k) - 1)`` tokens per request (the pooled acceptance is that of the requests
verified), in the time ``t(b, k)`` measured with those cuts.

What it measures:

* acceptance per position, pooled over requests and decayed per step (``decay``), from
  every verified request (vLLM's ``make_spec_decoding_stats`` inputs);
* per request, the same with a faster decay, shrunk towards the pooled value: a request
  whose own drafts fail (below break-even, and surely below the pooled acceptance: its estimate
  plus two standard errors, ``request_confidence``) stops being verified (``request_k``), and is
  re-probed;
* the wall time of whole engine steps (schedule to end of ``update_from_output``, or
  between two ``update_from_output`` calls when vLLM overlaps them), for steady pure-decode
  steps only (no prefill tokens, the drafts verified were made with the same ``k``), as
  the lower quartile of the last 16 samples per batch-size bucket and ``k`` (steps slowed
  down by something else on the machine do not count), cells compared over equally many
  of their latest samples, at least 16 (a spell of slow steps shorter than 13 does not move them);
  a ``k`` other than the one in use is estimated from its probes' cost relative to the steps
  of the ``k`` in use timed around them (``paired``), times the cost of the ``k`` in use now, so
  that a spell of slow steps moves every estimate alike.

Drafting must beat plain decoding by ``draft_margin`` (3 %) to be chosen: a smaller
expected gain is within the noise of a shared machine.

Exploration: each batch-size bucket first measures the user's ``K`` and ``0``; later it
probes another ``k`` for a couple of steps every ``probe_interval`` steps (doubling up to
``max_probe_interval`` while probes confirm the choice, back to the minimum when one
changes it), so it turns drafting back on when the workload changes.

Everything here runs on the host in the scheduler process; nothing touches the device.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

#: ``VLLM_SPEC_PLUGINS_POLICY``: ``adaptive`` (default), ``off`` (every step drafts
#: ``num_speculative_tokens``, as vLLM does), or an integer ``k`` (every step drafts ``k``).
ENV_POLICY = "VLLM_SPEC_PLUGINS_POLICY"
#: ``VLLM_SPEC_PLUGINS_POLICY_STATS``: a file the policy writes its decisions to (JSON),
#: every 5 seconds while it works, whenever the engine falls idle and at shutdown;
#: ``vllm-spec-plugins policy FILE`` prints it.
ENV_STATS = "VLLM_SPEC_PLUGINS_POLICY_STATS"
#: ``VLLM_SPEC_PLUGINS_POLICY_LOG_INTERVAL``: least seconds between two INFO lines about
#: drafting being turned off or on (default 10).
ENV_LOG_INTERVAL = "VLLM_SPEC_PLUGINS_POLICY_LOG_INTERVAL"
#: ``VLLM_SPEC_PLUGINS_POLICY_MAX_PROBE_INTERVAL``: most steps between two probes of another
#: ``k`` (default 512); lower turns drafting back on sooner after a workload change, at a
#: higher probing cost.
ENV_MAX_PROBE = "VLLM_SPEC_PLUGINS_POLICY_MAX_PROBE_INTERVAL"
#: ``VLLM_SPEC_PLUGINS_POLICY_COST_MODEL=PLAIN,PER_DRAFT``: for tests and simulations only. The policy
#: charges each step ``batch * PLAIN + PER_DRAFT * (draft tokens verified)`` (any unit; that is
#: ``batch * (PLAIN + PER_DRAFT * k)`` when no request is cut) instead of reading the wall clock, so its
#: decisions depend on acceptance alone, never on the machine's load. Never set it in production.
ENV_COST_MODEL = "VLLM_SPEC_PLUGINS_POLICY_COST_MODEL"


def lower_median(values: list[float]) -> float:
    """The median of ``values`` (not empty), the lower of the middle two for an even count."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def lower_quartile(values: list[float]) -> float:
    """The lower quartile of ``values`` (not empty): the ``(n - 1) // 4``-th smallest."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 4]


def bucket_of(b: int) -> int:
    """Batch-size bucket: exact up to 4, then 6, 8, 12, 16, 24, 32, ... (the upper end)."""
    if b <= 4:
        return max(b, 1)
    p = 1 << (b - 1).bit_length()
    return p * 3 // 4 if b <= p * 3 // 4 else p


@dataclass(frozen=True)
class PolicySettings:
    mode: str = "adaptive"
    """``adaptive``, ``off`` or ``pinned``."""
    pin: int | None = None
    decay: float = 0.97
    """Per-step decay of the pooled acceptance counts (every step, so that a probe after a long
    pause weighs more than what was seen before the pause)."""
    idle_decay: float = 0.9
    """Per-step decay while no drafts are verified: old evidence fades fast, so the next probe's
    fresh observations decide whether drafting comes back on."""
    request_decay: float = 0.9
    """Per-step decay of a request's own acceptance counts."""
    request_prior: float = 4.0
    """Weight (in observations) of the pooled acceptance in a request's estimate."""
    request_min_obs: float = 6.0
    """A request needs this many (decayed) observations of its own before it can be cut."""
    request_probe_every: int = 16
    """A cut request is verified again (full ``k``) once every so many of its steps."""
    request_confidence: float = 2.0
    """A request below break-even is cut only when its first-position acceptance plus this many standard errors of
    its estimate is still below the pooled acceptance: when it surely accepts less than the rest of the batch, not
    when it merely had a bad run. A request's estimate rests on about 10-14 (decayed) observations, so in a batch
    whose requests all accept alike, some always look worse than the rest by chance; cut on the estimate alone, a
    batch of 16 accepting 0.55-0.7 at ``k = 1`` lost 3-6 % against the best fixed ``k`` (no cuts), and a batch of 8
    accepting 0.3 lost 11 % (``tests/unit/test_policy.py::test_a_batch_that_accepts_alike_is_not_cut_by_chance``).
    Requiring the same margin against break-even instead kept the failing half of a mixed batch uncut, and lost
    the 5-10 % its cut gains (``test_the_failing_half_of_a_mixed_batch_is_cut``)."""
    cost_window: int = 16
    """Step-time samples per ``(batch-size bucket, k)`` whose lower quartile is the cost estimate."""
    paired: bool = True
    """Estimate a ``k`` other than the one in use from its cost *relative to* the steps timed around its probes (the
    median of its last 3 probes' ratios), times the cost of the ``k`` in use now; off: from its own samples, which
    date from its probes, maybe hundreds of steps ago. A slow spell on the machine that raises the ``k`` in use
    then raises the estimates of the others with it (docs/benchmarks.md, "Spells of slow steps")."""
    compare_samples: int = 16
    """Cells are compared over at least this many of their latest samples (all a cell has, when fewer). The ``k``
    in use is timed every step, the others only at probes, maybe hundreds of steps earlier; its lower quartile
    over its latest 8 samples rose with every spell of 7 or more slow steps on the machine (common on this
    project's shared CPU machine: 6-10 steps of 1.3-1.7x), while the old samples of the others did not, so a spell
    alone switched ``k`` until the next probe (up to ``max_probe_interval`` steps). Over 16, a spell must last 13
    steps; a lasting change of load is still followed, 13 steps later."""
    min_samples: int = 3
    """Steady samples of a ``(bucket, k)`` cell before it is trusted."""
    probe_steps: int = 2
    """Steps a probe lasts at least (the first switches ``k``; the second is steady and timed)."""
    probe_drafts: int = 8
    """A probe of ``k > 0`` lasts until this many draft positions were verified during it, counted over its
    requests (at most ``probe_max_steps`` steps): a batch of 8 sees them in one step, a lone request in
    several. A probe of a fixed number of steps saw one or two drafts at batch 1, and one rejection could
    keep drafting off (or at a smaller ``k``) until the next probe."""
    probe_max_steps: int = 16
    probe_interval: int = 16
    max_probe_interval: int = 512
    hysteresis: float = 0.02
    """Leave the current ``k`` only for an expected gain above this fraction."""
    draft_margin: float = 0.03
    """Draft (``k > 0``) only where it is expected to beat plain decoding by more than this
    fraction: step times on a shared machine are noisy, and a gain smaller than the noise is
    as likely a loss; the promise is never to be slower than not speculating."""
    close_contest: float = 0.05
    """A runner-up ``k`` expected within this fraction of the best is a close contest: it is the
    one probed, and probes stay at most ``close_probe_interval`` steps apart. Otherwise the
    acceptance of a position only the runner-up drafts (position ``k + 1``) is seen only at
    probes, and a noisy estimate of it could hold the choice at the wrong ``k``."""
    close_probe_interval: int = 64
    probe_budget: float = 0.05
    """Once probes are ``max_probe_interval`` apart, a probe that costs more than this fraction of the time
    between two probes (a drafter measured at many times a plain step) is spaced further: the interval
    becomes its extra cost over this budget, so a very slow drafter is probed ever less often."""
    log_interval: float = 10.0
    cost_model: tuple[float, float] | None = None
    """``(plain, per_draft)``: charge each step ``batch * plain + per_draft * verified`` instead of its wall time
    (tests and simulations; ``VLLM_SPEC_PLUGINS_POLICY_COST_MODEL``)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PolicySettings:
        env = os.environ if environ is None else environ
        raw = (env.get(ENV_POLICY) or "adaptive").strip().lower()
        kw: dict[str, Any] = {}
        for var, key, typ in ((ENV_LOG_INTERVAL, "log_interval", float), (ENV_MAX_PROBE, "max_probe_interval", int)):
            if env.get(var):
                try:
                    kw[key] = typ(env[var])
                except ValueError:
                    raise ValueError(f"{var}={env[var]!r}: expected a number") from None
        if env.get(ENV_COST_MODEL):
            try:
                plain, per_draft = (float(x) for x in env[ENV_COST_MODEL].split(","))
                if plain <= 0 or per_draft < 0:
                    raise ValueError
            except ValueError:
                raise ValueError(f"{ENV_COST_MODEL}={env[ENV_COST_MODEL]!r}: expected PLAIN,PER_DRAFT (two numbers, "
                                 f"PLAIN > 0), e.g. 1,0.33") from None
            kw["cost_model"] = (plain, per_draft)
        if kw.get("max_probe_interval", cls.probe_interval) < cls.probe_interval:
            kw["max_probe_interval"] = cls.probe_interval
        if raw in ("adaptive", "on", "auto", ""):
            return cls(**kw)
        if raw in ("off", "fixed", "0ff", "none", "false"):
            return cls(mode="off", **kw)
        try:
            k = int(raw)
        except ValueError:
            raise ValueError(f"{ENV_POLICY}={raw!r}: expected 'adaptive', 'off' or a number of draft tokens") from None
        if k < 0:
            raise ValueError(f"{ENV_POLICY}={raw!r}: the number of draft tokens must be >= 0")
        return cls(mode="pinned", pin=k, **kw)


def not_adaptive(settings: PolicySettings, vllm_config: Any) -> str | None:
    """Why the adaptive policy will not choose ``k`` for this engine's steps (``patch.scheduler.attach`` leaves it
    out, or pins ``k``), or ``None`` where it will."""
    spec = getattr(vllm_config, "speculative_config", None)
    dp = getattr(getattr(vllm_config, "parallel_config", None), "data_parallel_size", 1) or 1
    if settings.mode == "off":
        return f"{ENV_POLICY}=off"
    if settings.mode == "pinned":
        return f"{ENV_POLICY}={settings.pin} pins k"
    if getattr(spec, "num_speculative_tokens_per_batch_size", None):
        return "num_speculative_tokens_per_batch_size is set: vLLM's static schedule decides k"
    if dp > 1:
        return f"data parallel size {dp}"
    return None


@dataclass
class _Cell:
    """Step times of one ``(bucket, k)``: the lower quartile of the last ``window`` steady samples.

    Something else on the machine (another process, a garbage collection, a page fault)
    only ever makes a step slower, so a low quantile of recent samples tracks what the
    step itself costs; a mean, or even a median, of a few samples lets a burst of such
    steps make one ``k`` look expensive for as long as that ``k`` is rarely sampled.
    """

    window: int = 16
    samples: list[float] = field(default_factory=list)
    fractions: list[float] = field(default_factory=list)
    """Per sample, the fraction of the batch's requests whose drafts the step verified (1.0: none cut)."""
    n: int = 0
    estimate: float = 0.0
    """The current estimate (the lower quartile of the window)."""
    run_start: int = -1
    """The policy's step at the first sample of this cell's latest run of consecutive samples (a probe)."""
    last_step: int = -1
    """The policy's step at its latest sample."""
    ratios: list[tuple[int, float]] = field(default_factory=list)
    """Per run (probe), its cost relative to the ``k`` timed around it: ``(that k, ratio)``, the latest few."""
    ratio_run: int = -1
    """``run_start`` of the run whose ratio is ``ratios[-1]``."""

    def add(self, t: float, fraction: float = 1.0) -> None:
        self.samples.append(t)
        self.fractions.append(fraction)
        if len(self.samples) > self.window:
            del self.samples[0]
            del self.fractions[0]
        self.n += 1
        self.estimate = self.lower_quartile()

    def verified_fraction(self, last: int | None = None) -> float:
        """The mean fraction of requests verified over the last ``last`` samples (all of the window by default):
        the samples whose cost the estimate is taken from."""
        f = self.fractions[-last:] if last else self.fractions
        return sum(f) / len(f) if f else 1.0

    def lower_quartile(self, last: int | None = None) -> float:
        """The lower quartile of the last ``last`` samples (all of the window by default)."""
        return lower_quartile(self.samples[-last:] if last else self.samples)


class StepShape(NamedTuple):
    """What :meth:`AdaptivePolicy.end_step` is told about a finished step."""

    b: int
    """Requests in the batch."""
    k_drafted: int
    """Draft tokens the step's requests asked for (the next step verifies them)."""
    k_verified: int
    """The most draft tokens any request verified in this step."""
    pure_decode: bool
    """Every request decoded one token plus its drafts (no prefill): the steps the policy times."""
    n_verified: int | None = None
    """Draft tokens verified in this step, over all its requests (``None``: ``b * k_verified``, nothing cut)."""


@dataclass
class _Bucket:
    cells: dict[int, _Cell] = field(default_factory=dict)
    best: int | None = None
    next_probe: int = 0
    interval: int = 0
    probe_turn: int = 0
    """Which of the other k values the next probe measures (round robin)."""
    history: deque[tuple[int, int, float]] = field(default_factory=lambda: deque(maxlen=PAIR_HISTORY))
    """The latest timed steps of this bucket, ``(step, k, seconds)``: a probe's samples and those around it."""
    lookup_steps: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=LOOKUP_WINDOW))
    """Steps in which only prompt lookup's drafts were verified (the model's ``k`` 0 in them and the step before):
    ``(seconds, draft tokens verified)``, what verifying a draft token costs without drafting any
    (:meth:`AdaptivePolicy.lookup_token_cost`)."""


#: Where a request's pending drafts come from (:meth:`AdaptivePolicy.note_sources`): the plugin's model, or prompt
#: lookup (``runtime.lookup`` chooses with these values); 0 or absent: not reported.
SOURCE_MODEL, SOURCE_LOOKUP = 1, 2
SOURCE_NAMES = {SOURCE_MODEL: "model", SOURCE_LOOKUP: "lookup"}

#: Timed steps of a bucket kept to pair a probe with the steps around it (:meth:`AdaptivePolicy._pair`).
PAIR_HISTORY = 96
#: A probe is paired with the steps of another ``k`` from this many steps before it to this many after it.
PAIR_BEFORE, PAIR_AFTER = 24, 12
#: Probes (runs) whose ratios are kept per cell; their median is the cell's ratio.
PAIR_KEEP = 3
#: Steps that verified only prompt lookup's drafts kept per bucket, and the fewest that give its cost per token.
LOOKUP_WINDOW = 32
LOOKUP_MIN_STEPS = 8


@dataclass
class _Request:
    """What one request's drafts did, per draft position (decayed sums)."""

    accepted: list[float]
    """Drafts accepted at each position."""
    verified: list[float]
    """Drafts verified at each position."""
    steps: int = 0
    last_seen: int = 0


class AdaptivePolicy:
    """Chooses ``k`` in ``0..k_max`` per step (and per request), from measured acceptance and step cost."""

    def __init__(self, k_max: int, settings: PolicySettings | None = None, *,
                 clock: Callable[[], float] = time.perf_counter, log: Callable[[str], None] | None = None,
                 stats_path: str | None = None) -> None:
        if k_max < 1:
            raise ValueError("k_max must be >= 1")
        self.k_max = k_max
        self.cfg = settings or PolicySettings()
        if self.cfg.mode == "pinned" and (self.cfg.pin is None or self.cfg.pin > k_max):
            raise ValueError(f"{ENV_POLICY}={self.cfg.pin}: at most num_speculative_tokens={k_max}")
        self.clock = clock
        self.log = log or (lambda msg: None)
        self.stats_path = stats_path
        # pooled acceptance per position (weak prior: 0.5): of the model's drafts (all drafts where the runner reports
        # no source), and of prompt lookup's
        self.acc_s = [1.0] * k_max
        self.acc_n = [2.0] * k_max
        self.lookup_s = [1.0] * k_max
        self.lookup_n = [2.0] * k_max
        #: the source of each request's pending drafts, as the runner reported it (note_sources); the source of the
        #: drafts each request verifies in the step being run (taken when it is scheduled)
        self.sources: dict[str, tuple[int, int, int]] = {}  # request -> (source, step reported, k_model then)
        self._verifying: dict[str, int] = {}
        self._lookup_pending = 0  # requests of the step being scheduled whose drafts are the lookup's
        #: the most drafts of the model's one request verified in the latest step (positions its pool observed)
        self._model_width = 0
        self.sources_seen = False  # the runner reports sources (prompt lookup on V1, synchronous scheduling)
        #: the latest step's k for the model's drafts: the runner drafts that many with the model and pads the rest
        #: for the lookup's drafts; the model's are verified up to it (``k`` itself unless lookup's drafts raised it;
        #: set with ``k`` below)
        self._timed_alone = [True, True]  # the step before and this one drafted the model's k for every request
        self._k_models = [-1, -1]  # the model's k in the step before and this one (-1: none yet)
        self.buckets: dict[int, _Bucket] = {}
        self.requests: dict[str, _Request] = {}
        self.step = 0
        self.k = k_max if self.cfg.mode != "pinned" else int(self.cfg.pin or 0)
        self.k_model = self.k
        self._probe_k: int | None = None
        self._probe_left = 0
        self._probe_seen = 0  # draft positions verified since the probe began
        self._probe_taken = 0  # its steps so far
        self._probe_bucket: int | None = None
        self._b = 0
        # step timing
        self._t_sched: float | None = None
        self._t_last_end: float | None = None
        # stats
        self.k_steps = [0] * (k_max + 1)
        self.probe_steps = 0
        self.probe_interval_cost_bound = 0  # the largest probe interval a probe's cost imposed (0: none)
        self.switches_off = 0
        self.switches_on = 0
        self.request_cuts = 0
        self.source_verified = {SOURCE_MODEL: 0, SOURCE_LOOKUP: 0}
        self.source_accepted = {SOURCE_MODEL: 0, SOURCE_LOOKUP: 0}
        self.lookup_raised_steps = 0
        #: steps after which the engine core did not take drafts from the runner: there were none (k = 0; patch 25)
        self.draft_takes_skipped = 0
        self.verified_tokens = 0
        self.accepted_tokens = 0
        self.decide_seconds = 0.0
        self.decide_calls = 0
        self.host_seconds = 0.0
        """All host time the policy and its scheduler hooks spent (added by the hooks)."""
        self.step_seconds = 0.0
        self.timed_steps = 0
        self._drafting = k_max > 0 if self.cfg.mode != "pinned" else bool(self.cfg.pin)
        self._last_log = -math.inf
        self._suppressed = 0
        self._last_stats_write = -math.inf
        self._cuts_this_step = 0
        self._min_first_acceptance_step = -1
        self._min_first_acceptance_now = 0.0
        self._pooled1 = 0.5

    # -- estimates -----------------------------------------------------------

    def alphas(self) -> list[float]:
        return [s / n for s, n in zip(self.acc_s, self.acc_n)]

    def lookup_alphas(self) -> list[float]:
        return [s / n for s, n in zip(self.lookup_s, self.lookup_n)]

    @staticmethod
    def expected_tokens(alphas: list[float], k: int) -> float:
        e, p = 1.0, 1.0
        for a in alphas[:k]:
            p *= a
            e += p
        return e

    def costs(self, bucket: int) -> dict[int, float]:
        """Step-time estimates for every ``k`` of a bucket.

        Measured cells, linear interpolation between them; where the bucket has not measured
        both ends (``0`` and ``K``), the cost *ratios* of the nearest bucket that has, anchored
        on a cell measured here (so a batch size seen for the first time can choose at once; where
        that choice is to draft, ``_decide`` first measures its plain step; its probes refine it).
        """
        own = self._own_costs(bucket)
        if 0 in own and self.k_max in own:
            return own
        ref = self._nearest_complete(bucket)
        if ref is None:
            return own
        if own:
            anchor = min(own)
            scale = own[anchor] / ref[anchor]
        else:
            scale = 1.0  # relative units: only ratios matter for the choice
        return {k: own.get(k, ref[k] * scale) for k in range(self.k_max + 1)}

    def _nearest_complete(self, bucket: int) -> dict[int, float] | None:
        best, dist = None, math.inf
        for b in self.buckets:
            if b == bucket:
                continue
            c = self._own_costs(b)
            if 0 in c and self.k_max in c:
                d = abs(math.log2(b) - math.log2(bucket))
                if d < dist:
                    best, dist = c, d
        return best

    def _trusted(self, bucket: int) -> tuple[dict[int, _Cell], int]:
        """A bucket's cells with enough samples to be trusted, and how many of each cell's latest samples its
        estimates are taken over (see :meth:`_own_costs`)."""
        bk = self.buckets.get(bucket)
        trusted = {k: c for k, c in bk.cells.items() if c.n >= self.cfg.min_samples} if bk else {}
        return trusted, max(min((len(c.samples) for c in trusted.values()), default=0), self.cfg.compare_samples)

    def _pair(self, bk: _Bucket, k: int, cell: _Cell) -> None:
        """The cost of ``k``'s latest run of samples (a probe) relative to the ``k`` timed most around it (from
        ``PAIR_BEFORE`` steps before to ``PAIR_AFTER`` after): the ratio of their lower quartiles, both timed under
        the same load. Needs at least 3 samples of that other ``k``."""
        s0, s1 = cell.run_start, cell.last_step
        run, around = [], []
        for step, j, t in bk.history:
            if j == k:
                if s0 <= step <= s1:
                    run.append(t)
            elif s0 - PAIR_BEFORE <= step <= s1 + PAIR_AFTER:
                around.append((j, t))
        if not run or not around:
            return
        ref = Counter(j for j, _ in around).most_common(1)[0][0]
        ts = [t for j, t in around if j == ref]
        if len(ts) < 3:
            return
        ratio = lower_quartile(run) / lower_quartile(ts)
        if cell.ratios and cell.ratios[-1][0] == ref and cell.ratio_run == s0:
            cell.ratios[-1] = (ref, ratio)  # the same probe, more steps around it
        else:
            cell.ratios.append((ref, ratio))
            del cell.ratios[:-PAIR_KEEP]
        cell.ratio_run = s0

    def _own_costs(self, bucket: int) -> dict[int, float]:
        trusted, m = self._trusted(bucket)
        if not trusted:
            return {}
        # Compare like with like: every cell's lower quartile over as many (of its latest) samples
        # as the least-sampled cell has, but at least compare_samples (or all a cell has; with the
        # defaults, the whole window of 16). The chosen k gathers samples every step while the others
        # only get a probe's worth. Below 8, the minimum of 3 samples against the minimum of 3 others
        # made choices swing with every slow step (measured in make bench-policy); at 8, a spell of 7
        # slow steps of the k in use made it look dearer than the others, timed at quieter probes, and
        # switched k until the next probe (see PolicySettings.compare_samples).
        known = {k: c.lower_quartile(m) for k, c in trusted.items()}
        bk = self.buckets[bucket]
        if self.cfg.paired and bk.best in known:
            # Timed at other moments than the k in use: scale the k in use's cost now by each one's cost relative to
            # the steps around its probes (load cancels out of a ratio taken under one load).
            own = dict(known)
            for k, c in trusted.items():
                if k != bk.best and c.ratios:
                    ref = c.ratios[-1][0]
                    if ref in own:
                        known[k] = lower_median([r for j, r in c.ratios if j == ref]) * own[ref]
        ks = sorted(known)
        out = {}
        for k in range(self.k_max + 1):
            if k in known:
                out[k] = known[k]
                continue
            lo = [x for x in ks if x < k]
            hi = [x for x in ks if x > k]
            if lo and hi:
                a, b = lo[-1], hi[0]
                out[k] = known[a] + (known[b] - known[a]) * (k - a) / (b - a)
        return out

    def verified_fraction(self, bucket: int, k: int) -> float:
        """The fraction of a batch's requests whose ``k`` drafts are verified (the others cut by ``request_k``),
        over the samples whose cost :meth:`costs` estimates: this bucket's cell of ``k``, else the nearest
        measured ``k > 0`` of this bucket, else 1.0 (nothing cut)."""
        trusted, m = self._trusted(bucket)
        own = [j for j in trusted if j > 0]
        if k <= 0 or not own:
            return 1.0
        return trusted[min(own, key=lambda j: (abs(j - k), j))].verified_fraction(m)

    def expected_yield(self, bucket: int, k: int) -> float:
        """Tokens per request a step at ``k`` yields: ``1 + u * (E(k) - 1)``, ``u`` the fraction verified."""
        return 1.0 + self.verified_fraction(bucket, k) * (self.expected_tokens(self.alphas(), k) - 1.0)

    def rates(self, bucket: int) -> dict[int, float]:
        """Expected tokens per second per request, ``(1 + u (E(k) - 1)) / t(k)``, for every ``k`` with a cost
        estimate: with requests cut from verification, a step at ``k`` costs less than a full one (measured),
        and yields less (counted here)."""
        return {k: self.expected_yield(bucket, k) / t for k, t in self.costs(bucket).items() if t > 0}

    # -- the decision ----------------------------------------------------------

    def decide(self, b: int) -> int:
        """``k`` for the step being scheduled with ``b`` requests (called once per step)."""
        t0 = time.perf_counter()
        self.step += 1
        self._b = b
        # The latest step's k_model (k unless lookup's drafts raised it): at 0 the model's evidence fades fast, so
        # that the next probe's counts; else the positions the model's drafts were verified at decay and the others
        # keep what they last saw. Where the runner reports sources, that is up to the model's widest verified row:
        # lookup's drafts may have raised k past k_model (decaying the rest too would leave them to the next one or
        # two observations), or been every request's (nothing of the model's decays).
        if self.k_model <= 0:
            self._decay_pooled(self.cfg.idle_decay)
        else:
            self._decay_pooled(self.cfg.decay, self._model_width if self.sources_seen else self.k)
        self._model_width = 0
        if self._lookup_pending:
            self._decay_pooled(self.cfg.decay, self.k, lookup=True)
        k = self.k_model = self._decide(b)
        if self.sources_seen and self._probe_k is None and self.cfg.mode == "adaptive" and self._measured(b, k):
            kl = self._lookup_k(b)
            if kl > k:  # the lookup's drafts verified up to kl; the model drafts k_model, verified up to it
                k = kl
                self.lookup_raised_steps += 1
        self._timed_alone = [self._timed_alone[1], k == self.k_model]
        self._k_models = [self._k_models[1], self.k_model]
        self.k = k
        self.k_steps[k] += 1
        dt = time.perf_counter() - t0
        self.decide_seconds += dt
        self.host_seconds += dt
        self.decide_calls += 1
        return k

    def _decide(self, b: int) -> int:
        cfg = self.cfg
        if cfg.mode == "off":
            return self.k_max
        if cfg.mode == "pinned":
            return int(cfg.pin or 0)
        bucket = bucket_of(b)
        bk = self._bucket(bucket)
        if self._probe_bucket == bucket and self._probe_k is not None and (
                self._probe_left > 0 or (self._probe_k > 0 and self._probe_seen < cfg.probe_drafts
                                         and self._probe_taken < cfg.probe_max_steps)):
            self._probe_left = max(self._probe_left - 1, 0)
            self._probe_taken += 1
            self.probe_steps += 1
            return self._probe_k
        self._probe_left = 0
        self._probe_k = None
        rates = self.rates(bucket)
        if 0 not in rates or self.k_max not in rates:
            # Nothing to go by (the first batch size seen): measure the user's K, then plain decoding.
            for k in (self.k_max, 0):
                cell = bk.cells.get(k)
                if cell is None or cell.n < cfg.min_samples:
                    return self._explore(bucket, k, cfg.min_samples + 1)
            rates = self.rates(bucket)
        margin = 1 + cfg.draft_margin
        best = max(rates, key=lambda k: (rates[k] / (margin if k else 1.0), -k))
        own0 = bk.cells.get(0)
        if best > 0 and (own0 is None or own0.n < cfg.min_samples):
            # Drafting chosen on cost ratios borrowed from another batch size: first measure the plain
            # step here (a few steps, never slower than not speculating). Verification grows dearer with
            # the batch on a compute-bound machine, so ratios from a smaller batch flatter drafting; with
            # its own t(0), and t(k) measured while it drafts, the bucket stops borrowing within steps.
            return self._explore(bucket, 0, cfg.min_samples + 1)
        cur = bk.best if bk.best is not None else self.k
        if cur in rates and best != cur and rates[best] < rates[cur] * (1 + cfg.hysteresis):
            best = cur
        if self.step >= bk.next_probe:
            others = [k for k in range(self.k_max + 1) if k != best]
            unmeasured = [k for k in others if bk.cells.get(k) is None or bk.cells[k].n < cfg.min_samples]
            runner = max((k for k in others if k in rates), key=lambda k: rates[k], default=None)
            close = runner is not None and rates[runner] >= rates[best] * (1 - cfg.close_contest)
            if unmeasured:
                probe = unmeasured[0]
            elif close and runner is not None:  # (close implies a runner-up; the test narrows its type)
                probe = runner  # a close runner-up: its estimate (its acceptance above all) needs fresh data
            else:
                probe = others[bk.probe_turn % len(others)]
                bk.probe_turn += 1
            changed = bk.best is not None and bk.best != best
            if changed:
                bk.interval = cfg.probe_interval
            elif close:  # keep probing it often: each probe costs at most close_contest of two steps
                bk.interval = min(bk.interval * 2, cfg.close_probe_interval, max(cfg.max_probe_interval, 1))
            else:
                bk.interval = min(bk.interval * 2, cfg.max_probe_interval)
            bound = self._probe_cost_bound(bucket, best, probe)
            if bound > max(bk.interval, cfg.max_probe_interval):
                bk.interval = bound
                self.probe_interval_cost_bound = max(self.probe_interval_cost_bound, bound)
            bk.next_probe = self.step + bk.interval
            self._set_best(bk, bucket, best, rates)
            return self._explore(bucket, probe, cfg.probe_steps)
        self._set_best(bk, bucket, best, rates)
        return best

    def _measured(self, b: int, k: int) -> bool:
        """Whether the model's ``k`` has been timed at ``b``'s bucket (``min_samples`` steady steps), is 0, or the
        bucket's costs are its own. Where a bucket chose ``k`` on cost ratios borrowed from another batch size, the
        lookup does not raise ``k`` past it until it has been timed: a step whose widths the lookup mixed is not
        timed, and where a match is pending in nearly every step (a large batch), the model's ``k`` would never be
        timed here, and could draft on where it does not pay."""
        bucket = bucket_of(b)
        if k <= 0:
            return True
        bk = self.buckets.get(bucket)
        cell = bk.cells.get(k) if bk else None
        if cell is not None and cell.n >= self.cfg.min_samples:
            return True
        own = self._own_costs(bucket)
        return (0 in own and self.k_max in own) or self._nearest_complete(bucket) is None

    def _lookup_k(self, b: int) -> int:
        """How many drafts a request whose drafts turn out prompt lookup's verifies (the runner reports each request's
        source): ``argmax_k E_lookup(k) / t(b, k)``, drafting beating plain decoding by ``draft_margin``.

        ``t(b, k)`` is what a step costs in which every request verifies ``k`` drafts without drafting them:
        ``t(b, 0) + b * k * c``, with ``c`` the cost of verifying one draft token measured in the steps that verified
        only the lookup's (:meth:`lookup_token_cost`). Until enough such steps were timed, the cost measured for a
        step in which every request verifies ``k`` of the model's drafts, which errs towards fewer: it includes
        drafting them (at a batch of 16 on this project's CPU with EAGLE-3, a step that drafted and verified one token
        per request cost 1.45x a plain step, verifying one lookup draft per request without drafting about 1.3x), and
        the requests without a match verify only the model's ``k_model``."""
        bucket = bucket_of(b)
        costs = self.costs(bucket)
        if 0 not in costs:
            return 0
        c = self.lookup_token_cost(bucket)
        if c is not None:
            costs = {k: costs[0] + b * k * c for k in range(self.k_max + 1)}
        al = self.lookup_alphas()
        rates = {k: self.expected_tokens(al, k) / t for k, t in costs.items() if t > 0}
        best = max(rates, key=lambda k: (rates[k], -k), default=0)
        return best if rates[best] > rates[0] * (1 + self.cfg.draft_margin) else 0

    def lookup_token_cost(self, bucket: int) -> float | None:
        """Seconds a step spends verifying one draft token beyond a plain step, at ``bucket``: the median over the
        latest steps that verified only prompt lookup's drafts (at least ``LOOKUP_MIN_STEPS``) of their time less
        the median plain step's, per draft token verified (at least 0); ``None`` until then, or with no plain step
        measured. Medians on both sides: the slow steps a shared machine adds to either cancel out."""
        bk = self.buckets.get(bucket)
        cell = bk.cells.get(0) if bk else None
        if bk is None or cell is None or cell.n < self.cfg.min_samples or len(bk.lookup_steps) < LOOKUP_MIN_STEPS:
            return None
        plain = lower_median(cell.samples)
        return max(lower_median([(dt - plain) / n for dt, n in bk.lookup_steps]), 0.0)

    def _probe_cost_bound(self, bucket: int, best: int, probe: int) -> int:
        """Steps between probes for which a probe of ``probe`` costs at most ``probe_budget`` of the time at
        ``best``: its extra cost (in steps at ``best``) over the budget; 0 when a cost is unknown."""
        costs = self.costs(bucket)
        if probe not in costs or best not in costs or costs[best] <= 0:
            return 0
        extra = self._probe_length(bucket, probe) * max(costs[probe] / costs[best] - 1.0, 0.0)
        return int(extra / self.cfg.probe_budget) + 1 if extra > 0 else 0

    def _probe_length(self, bucket: int, k: int) -> int:
        """Steps a probe of ``k`` is expected to last: ``probe_drafts`` verified positions at ``bucket``'s
        batch size (each request verifies ``E(k - 1)`` positions a step), within ``probe_steps`` ..
        ``probe_max_steps``."""
        cfg = self.cfg
        if k <= 0:
            return cfg.probe_steps
        per_step = max(bucket, 1) * self.expected_tokens(self.alphas(), k - 1)
        need = 1 + math.ceil(cfg.probe_drafts / per_step)  # its first step verifies the drafts made before it
        return max(cfg.probe_steps, min(cfg.probe_max_steps, need))

    def _bucket(self, bucket: int) -> _Bucket:
        """``bucket``'s state, new (:meth:`_new_bucket`) for a batch size seen for the first time."""
        return self.buckets.get(bucket) or self._new_bucket(bucket)

    def _new_bucket(self, bucket: int) -> _Bucket:
        """A batch size seen for the first time probes as rarely as the most confident bucket so far:
        batch sizes come and go (every batch shrinks as its requests finish), and each starting its
        own probing from scratch would spend many steps on probes."""
        interval = max([self.cfg.probe_interval] + [b.interval for b in self.buckets.values()])
        bk = self.buckets[bucket] = _Bucket(interval=interval, next_probe=self.step + interval)
        return bk

    def _explore(self, bucket: int, k: int, steps: int) -> int:
        self._probe_k = k
        self._probe_left = steps - 1
        self._probe_seen = 0
        self._probe_taken = 1
        self._probe_bucket = bucket
        self.probe_steps += 1
        return k

    def _set_best(self, bk: _Bucket, bucket: int, best: int, rates: dict[int, float]) -> None:
        bk.best = best
        drafting = best > 0
        if drafting == self._drafting:
            return
        self._drafting = drafting
        if drafting:
            self.switches_on += 1
        else:
            self.switches_off += 1
        now = self.clock()
        if now - self._last_log < self.cfg.log_interval:
            self._suppressed += 1
            return
        gain = rates[best] / rates[0] if rates.get(0) else float("nan")
        al = "/".join(f"{a:.2f}" for a in self.alphas())
        if drafting:
            msg = (f"vllm_spec_plugins: adaptive policy turned drafting on: k={best} at batch size {self._b} "
                   f"(expected {gain:.2f}x the tokens/s of plain decoding; acceptance per position {al})")
        else:
            k = self.k_max
            ratio = (self.costs(bucket).get(k, float("nan")) / self.costs(bucket)[0]) if self.costs(bucket).get(0) \
                else float("nan")
            msg = (f"vllm_spec_plugins: adaptive policy turned drafting off at batch size {self._b}: verifying "
                   f"k={k} costs {ratio:.2f}x a plain step for {self.expected_tokens(self.alphas(), k):.2f} "
                   f"tokens per request (acceptance per position {al}); it probes now and then")
        if self._suppressed:
            msg += f" [{self._suppressed} earlier change(s) not logged]"
            self._suppressed = 0
        self._last_log = now
        self.log(msg)

    # -- per request -------------------------------------------------------------

    def note_sources(self, req_ids: list[str], sources: list[int] | None) -> None:
        """Where each request's pending drafts come from (V1 with prompt lookup, synchronous scheduling: the runner
        reports it with the drafts); ``None``: not reported, those requests' sources are forgotten."""
        if sources is None:
            if self.sources:  # (none kept without prompt lookup: nothing to do each step)
                for r in req_ids:
                    self.sources.pop(r, None)
            return
        self.sources_seen = True
        for r, src in zip(req_ids, sources):
            self.sources[r] = (int(src), self.step, self.k_model)  # the drafts of the step just decided

    def request_width(self, req_id: str, k: int) -> int:
        """How many of a request's ``k`` pending drafts to verify, before the step is scheduled: all of the lookup's;
        of the model's, at most the ``k_model`` they were drafted with (the rest is padding, where lookup raised
        ``k``), and 0 where the request's drafts keep failing (:meth:`request_k`); where no source was reported, as
        the model's."""
        src, _, k_model = self.sources.pop(req_id, (0, 0, k))
        self._verifying[req_id] = src
        if src == SOURCE_LOOKUP:
            self._lookup_pending += 1
            return k
        if src == SOURCE_MODEL and k_model < k:
            k = k_model
        return self.request_k(req_id, k) if k > 0 else 0

    def request_k(self, req_id: str, k: int) -> int:
        """How many of ``k`` drafts to verify for one request (``k`` or 0), before the step is scheduled.

        Cuts only in batches of two or more, at most half of the batch per step: a lone request
        is the pool, and the requests still verified keep the pooled estimate fresh."""
        if k <= 0 or self.cfg.mode != "adaptive" or self._b < 2 or 2 * (self._cuts_this_step + 1) > self._b:
            return k  # the batch decision covers a lone request; the uncut half keeps the pooled estimate fresh
        r = self.requests.get(req_id)
        if r is None or r.verified[0] < self.cfg.request_min_obs:
            return k
        r.steps += 1
        if r.steps % self.cfg.request_probe_every == 0:
            return k
        if self._min_first_acceptance_step != self.step:  # once per step
            self._min_first_acceptance_step = self.step
            self._min_first_acceptance_now = self._min_first_acceptance()
            self._pooled1 = self.acc_s[0] / self.acc_n[0]
        n = r.verified[0] + self.cfg.request_prior
        a1 = (r.accepted[0] + self.cfg.request_prior * self._pooled1) / n
        upper = a1 + self.cfg.request_confidence * math.sqrt(max(a1 * (1.0 - a1), 0.01) / n)
        if a1 >= self._min_first_acceptance_now or upper >= self._pooled1:
            return k  # its drafts pay, or it is not surely worse than the rest: an unlucky run, not a failing request
        self.request_cuts += 1
        self._cuts_this_step += 1
        return 0

    def _min_first_acceptance(self) -> float:
        """Least first-position acceptance that pays for a request's verified tokens at the current ``k``.

        Adding one verified token costs about ``(t(k) - t(0)) / (u b k)`` seconds (drafting included,
        so this errs towards keeping drafts) and yields ``a1`` tokens; it pays when
        ``a1 / cost >= tokens per second of the step``.
        """
        bucket = bucket_of(self._b)
        costs = self.costs(bucket)
        k = self.k
        if k <= 0 or k not in costs or 0 not in costs or costs[k] <= costs[0]:
            return 0.0
        b = max(self._b, 1)
        u = self.verified_fraction(bucket, k)  # t(k) was measured with this fraction verified
        per_token = (costs[k] - costs[0]) / (u * b * k)
        rate = b * self.expected_yield(bucket, k) / costs[k]
        return per_token * rate

    # -- observations -------------------------------------------------------------

    def begin_step(self) -> None:
        """The scheduler starts a step (``schedule()`` entry)."""
        self._t_sched = self.clock()
        self._cuts_this_step = 0
        self._lookup_pending = 0
        self._verifying.clear()

    def observe_request(self, req_id: str, num_draft: int, num_accepted: int) -> None:
        """One request's verification result in the step being finished."""
        if num_draft <= 0:
            return
        self.verified_tokens += num_draft
        self.accepted_tokens += num_accepted
        n = min(num_draft, self.k_max)
        a = max(0, min(num_accepted, n))
        src = self._verifying.get(req_id, 0)
        if src:
            self.source_verified[src] += num_draft
            self.source_accepted[src] += num_accepted
        if self._probe_k:
            self._probe_seen += min(a + 1, n)
        r = None
        if src == SOURCE_LOOKUP:  # the lookup's own pool; the model's, and the request's own estimate, see none
            acc_s, acc_n = self.lookup_s, self.lookup_n
        else:
            acc_s, acc_n = self.acc_s, self.acc_n
            self._model_width = max(self._model_width, n)
            r = self.requests.get(req_id)
            if r is None:
                r = self.requests[req_id] = _Request([0.0] * self.k_max, [0.0] * self.k_max)
            r.last_seen = self.step
            for j in range(n):
                r.accepted[j] *= self.cfg.request_decay
                r.verified[j] *= self.cfg.request_decay
        for j in range(min(a + 1, n)):  # positions 1..a accepted, a+1 rejected (if drafted)
            ok = 1.0 if j < a else 0.0
            acc_s[j] += ok
            acc_n[j] += 1.0
            if r is not None:
                r.accepted[j] += ok
                r.verified[j] += 1.0

    def _decay_pooled(self, d: float, positions: int | None = None, *, lookup: bool = False) -> None:
        """Decay the pooled counts of the first ``positions`` positions (all by default): the model's, or with
        ``lookup`` prompt lookup's.

        While ``k`` tokens are drafted, positions beyond ``k`` get no observations; decaying them
        anyway would leave their estimate to the last probe's one or two observations."""
        acc_s, acc_n = (self.lookup_s, self.lookup_n) if lookup else (self.acc_s, self.acc_n)
        n = self.k_max if positions is None else min(positions, self.k_max)
        for j in range(n):
            acc_s[j] *= d
            acc_n[j] *= d

    def step_start(self) -> float | None:
        """When the step being finished started, as :meth:`end_step` times it: at ``schedule()``, or at the end of the
        step before when vLLM overlaps the two (idle time between steps never counts); None before any schedule."""
        start = self._t_sched
        if self._t_last_end is not None and start is not None:
            start = max(start, self._t_last_end)
        return start

    def end_step(self, *, b: int, k_drafted: int, k_verified: int, pure_decode: bool,
                 n_verified: int | None = None) -> None:  # StepShape's fields
        """The step finished (end of ``update_from_output``); time it if it was steady."""
        now = self.clock()
        start = self.step_start()
        self._t_last_end = now
        if start is None or not pure_decode or b <= 0:
            return
        if self._lookup_pending and n_verified and self._k_models == [0, 0]:
            # only the lookup's drafts verified, none drafted by the model: what verifying a draft token costs
            self._time_lookup(b, now - start, n_verified)
        if not all(self._timed_alone):
            # Lookup raised k in this step or the one before. Where no lookup draft was verified in it and the model's
            # were verified at the k_model it drafts now, it is a step of the model's at k_model (and a lookup search,
            # and padding); otherwise its widths are mixed, which no cell measures.
            if self._lookup_pending or k_verified != self.k_model:
                return
            k_drafted = self.k_model
        elif k_verified != k_drafted:
            return
        dt = now - start
        full = b * k_verified
        verified = full if n_verified is None else max(0, min(n_verified, full))
        dt = self._charged(b, verified, dt)
        if dt <= 0:
            return
        bk = self._bucket(bucket_of(b))
        cell = bk.cells.setdefault(k_drafted, _Cell(window=self.cfg.cost_window))
        cell.add(dt, verified / full if full else 1.0)
        if not bk.history or bk.history[-1][1] != k_drafted:
            cell.run_start = self.step
        cell.last_step = self.step
        bk.history.append((self.step, k_drafted, dt))
        if self.cfg.paired:
            for k, c in bk.cells.items():  # probes within PAIR_AFTER steps: their ratios take in this step
                if k != bk.best and self.step - c.last_step <= PAIR_AFTER:
                    self._pair(bk, k, c)
        self.step_seconds += dt
        self.timed_steps += 1
        if self.step % 64 == 0:
            self._purge()
        if self.stats_path and now - self._last_stats_write > 5.0:
            self.write_stats()

    def _charged(self, b: int, verified: int, dt: float) -> float:
        """A step's cost: its wall time ``dt``, or with ``cost_model`` (tests and simulations: a cost the machine's
        load cannot change) ``b * plain + per_draft * verified``."""
        if self.cfg.cost_model is None:
            return dt
        plain, per_draft = self.cfg.cost_model
        return b * plain + per_draft * verified

    def _time_lookup(self, b: int, dt: float, n_verified: int) -> None:
        dt = self._charged(b, n_verified, dt)
        if dt <= 0:
            return
        bk = self._bucket(bucket_of(b))
        bk.lookup_steps.append((dt, n_verified))

    def _purge(self) -> None:
        old = [r for r, st in self.requests.items() if self.step - st.last_seen > 256]
        for r in old:
            del self.requests[r]
        for r in [r for r, (_, step, _) in self.sources.items() if self.step - step > 256]:
            del self.sources[r]  # finished with drafts pending

    # -- reporting -------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        steps = sum(self.k_steps)
        out: dict[str, Any] = {
            "mode": self.cfg.mode if self.cfg.mode != "pinned" else f"pinned k={self.cfg.pin}",
            "k_max": self.k_max,
            "steps": steps,
            "k_steps": {str(k): n for k, n in enumerate(self.k_steps)},
            "probe_steps": self.probe_steps,
            "probe_interval_cost_bound": self.probe_interval_cost_bound,
            "switches_off": self.switches_off,
            "switches_on": self.switches_on,
            "request_cuts": self.request_cuts,
            "draft_takes_skipped": self.draft_takes_skipped,
            "verified_draft_tokens": self.verified_tokens,
            "accepted_draft_tokens": self.accepted_tokens,
            "acceptance_per_position": [round(a, 4) for a in self.alphas()],
            "decide_us_per_step": round(1e6 * self.decide_seconds / max(self.decide_calls, 1), 2),
            "host_us_per_step": round(1e6 * self.host_seconds / max(self.decide_calls, 1), 2),
            "mean_step_ms": round(1e3 * self.step_seconds / max(self.timed_steps, 1), 3),
            "cost_per_step_ratio": round(self.host_seconds / max(self.decide_calls, 1)
                                         / max(self.step_seconds / max(self.timed_steps, 1), 1e-12), 6),
            "buckets": {},
        }
        if self.source_verified[SOURCE_LOOKUP] or self.source_verified[SOURCE_MODEL]:
            # where the runner reported each request's source (prompt lookup on V1): what each source's drafts did
            out["sources"] = {name: {"verified_draft_tokens": self.source_verified[src],
                                     "accepted_draft_tokens": self.source_accepted[src]}
                              for src, name in SOURCE_NAMES.items()}
            out["sources"]["lookup"]["acceptance_per_position"] = [round(a, 4) for a in self.lookup_alphas()]
            out["lookup_raised_steps"] = self.lookup_raised_steps
        for bucket in sorted(self.buckets):
            bk = self.buckets[bucket]
            costs = self.costs(bucket)
            base = costs.get(0)
            rates = self.rates(bucket)
            out["buckets"][str(bucket)] = {
                "best_k": bk.best,
                "step_ms": {str(k): round(1e3 * c.estimate, 3) for k, c in sorted(bk.cells.items())},
                "samples": {str(k): c.n for k, c in sorted(bk.cells.items())},
                "cost_ratio": {str(k): round(t / base, 3) for k, t in sorted(costs.items())} if base else {},
                "verified_fraction": {str(k): round(self.verified_fraction(bucket, k), 3)
                                      for k in sorted(costs) if k > 0},
                "expected_speedup": {str(k): round(r / rates[0], 3)
                                     for k, r in sorted(rates.items())} if rates.get(0) else {},
            }
            c = self.lookup_token_cost(bucket)
            if c is not None:  # measured in the steps that verified only prompt lookup's drafts
                out["buckets"][str(bucket)]["lookup_token_ms"] = round(1e3 * c, 4)
        return out

    def summary_line(self) -> str:
        s = self.summary()
        steps = max(s["steps"], 1)
        ks = ", ".join(f"k={k}: {100 * n / steps:.0f}%" for k, n in s["k_steps"].items() if n)
        best = ", ".join(f"b<={b}: k={v['best_k']}" for b, v in s["buckets"].items() if v["best_k"] is not None)
        al = "/".join(f"{a:.2f}" for a in s["acceptance_per_position"])
        return (f"vllm_spec_plugins: adaptive policy ({s['mode']}) over {s['steps']} steps: {ks or 'no steps'}; "
                f"chosen by batch size: {best or 'n/a'}; drafting turned off {s['switches_off']}x, on "
                f"{s['switches_on']}x; probes {100 * s['probe_steps'] / steps:.1f}% of steps"
                + (f" (spaced {s['probe_interval_cost_bound']} steps apart: a probe costs many plain steps)"
                   if s.get("probe_interval_cost_bound") else "") + "; acceptance per "
                f"position {al}; {s['host_us_per_step']} us host time per step "
                f"({100 * s['cost_per_step_ratio']:.3f}% of a step)")

    def write_stats(self) -> None:
        if not self.stats_path:
            return
        self._last_stats_write = self.clock()
        tmp = f"{self.stats_path}.tmp{os.getpid()}"
        try:
            with open(tmp, "w") as f:
                json.dump(self.summary(), f, indent=1)
            os.replace(tmp, self.stats_path)
        except OSError as e:
            if not getattr(self, "_stats_warned", False):  # once: the policy keeps working without its file
                self._stats_warned = True
                self.log(f"vllm_spec_plugins: cannot write the policy statistics to {ENV_STATS}="
                         f"{self.stats_path!r} ({type(e).__name__}: {e}); the policy goes on without them")


def format_summary(s: dict[str, Any]) -> str:
    """A policy statistics file (:meth:`AdaptivePolicy.summary`) as text, for ``vllm-spec-plugins policy``."""
    steps = max(s.get("steps", 0), 1)
    lines = [
        f"Drafting policy: {s['mode']}, k in 0..{s['k_max']}, {s['steps']} steps",
        "  k chosen:   " + " | ".join(f"k={k}: {100 * n / steps:.1f}%" for k, n in s["k_steps"].items()),
        f"  probes:     {100 * s['probe_steps'] / steps:.1f}% of steps; drafting turned off {s['switches_off']}x, "
        f"on {s['switches_on']}x; drafts of failing requests skipped {s['request_cuts']}x",
        "  acceptance: " + " / ".join(f"{a:.2f}" for a in s["acceptance_per_position"])
        + " (per draft position, given the previous ones were accepted)",
        f"  cost:       {s.get('host_us_per_step', s['decide_us_per_step'])} us of host time per step "
        f"({s.get('cost_per_step_ratio', 0):.5f} of a mean timed step of {s['mean_step_ms']} ms); "
        f"{s['decide_us_per_step']} us of it deciding",
    ]
    if s.get("sources"):
        src = s["sources"]
        lk, md = src["lookup"], src["model"]
        lines.append(f"  lookup:     {lk['accepted_draft_tokens']} of {lk['verified_draft_tokens']} prompt-lookup drafts "
                     "accepted (per position " + " / ".join(f"{a:.2f}" for a in lk["acceptance_per_position"])
                     + f"), {md['accepted_draft_tokens']} of {md['verified_draft_tokens']} of the model's; k raised "
                     f"for the lookup's in {100 * s['lookup_raised_steps'] / steps:.1f}% of steps")
    if s.get("buckets"):
        lines += ["", f"  {'batch size':<11} {'best k':<7} {'step ms by k':<36} {'expected speedup by k'}"]
        for b, v in s["buckets"].items():
            ms = ", ".join(f"{k}: {t}" for k, t in v["step_ms"].items()) or "-"
            sp = ", ".join(f"{k}: {x}x" for k, x in v["expected_speedup"].items()) or "-"
            cut = {k: f for k, f in v.get("verified_fraction", {}).items() if f < 0.995}
            if cut:  # requests cut from verification: the steps at k verified this fraction of the batch
                sp += " (verified " + ", ".join(f"{k}: {100 * f:.0f}%" for k, f in cut.items()) + " of the batch)"
            if "lookup_token_ms" in v:
                sp += f"; verifying a lookup draft token {v['lookup_token_ms']} ms"
            lines.append(f"  {'<= ' + b:<11} {v['best_k']!s:<7} {ms:<36} {sp}")
    return "\n".join(lines)
