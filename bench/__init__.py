"""Benchmarks and draft training for vllm-spec-plugins (run stages as ``python -m bench.<name>``)."""
