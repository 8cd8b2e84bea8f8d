"""bench/engine_worker.py's closed loop (``bench.run --stream``): c requests in flight, answers in prompt order."""

from __future__ import annotations

import types

from bench.engine_worker import generate_stream


class _Engine:
    """Request ``p`` takes ``p[0]`` steps and answers ``p``; records how many were in flight at each step."""

    def __init__(self) -> None:
        self.live: dict[str, list] = {}
        self.in_flight: list[int] = []
        self.params: dict[str, object] = {}

    def add_request(self, rid, prompt, params):
        assert rid not in self.live
        self.live[rid] = [prompt, prompt[0]]
        self.params[rid] = params

    def step(self):
        self.in_flight.append(len(self.live))
        out = []
        for rid, held in list(self.live.items()):
            held[1] -= 1
            if held[1] == 0:
                del self.live[rid]
                out.append(types.SimpleNamespace(request_id=rid, finished=True,
                                                 outputs=[types.SimpleNamespace(token_ids=held[0])]))
        return out


def test_c_requests_stay_in_flight_and_the_next_starts_as_one_finishes():
    e = _Engine()
    prompts = [[3], [1], [1], [2], [5], [1]]
    assert generate_stream(e, prompts, [None] * 6, 2, "run1") == prompts
    # batches of two would wait for each pair's longest: 3 + 2 + 5 = 10 steps; the closed loop takes 8, the last
    # three with [5] alone
    assert e.in_flight == [2, 2, 2, 2, 2, 1, 1, 1] and not e.live
    assert generate_stream(e, prompts[:1], [None], 4, "run2") == prompts[:1]


def test_each_request_gets_its_own_sampling_parameters():
    """``bench.run --lengths varied`` gives each prompt an answer length of its own."""
    e = _Engine()
    prompts = [[2], [1], [3]]
    generate_stream(e, prompts, ["a", "b", "c"], 2, "run1")
    assert e.params == {"run1-0": "a", "run1-1": "b", "run1-2": "c"}
