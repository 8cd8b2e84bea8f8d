"""Put on an engine's ``PYTHONPATH`` by ``bench.policy --step-log``: logs each step's time (``bench/steplog.py``).

Runs at the start of every Python process of that engine. It shadows any other ``sitecustomize`` module."""

import os
import sys

if os.environ.get("BENCH_STEP_LOG"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        from bench.steplog import install

        install(os.environ["BENCH_STEP_LOG"], os.environ.get("BENCH_STEP_LOG_TAG", ""))
    finally:
        del sys.path[0]
