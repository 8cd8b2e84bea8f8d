"""A plugin that parses ``sys.argv`` at import, as a script would: inside vLLM (or our CLI) argparse meets
arguments it does not know and exits (``SystemExit(2)``). It must never stop plain vLLM."""

import argparse

argparse.ArgumentParser(prog="vsp-exiting-plugin").parse_args()
