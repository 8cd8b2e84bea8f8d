"""Put on an engine's ``PYTHONPATH`` by ``bench.run --step-time``: times each step's parts (``bench/steptime.py``).

Runs at the start of every Python process of that engine. It shadows any other ``sitecustomize`` module."""

import os
import sys

if os.environ.get("BENCH_STEP_TIME"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        from bench.steptime import install

        install(os.environ["BENCH_STEP_TIME"])
    finally:
        del sys.path[0]
