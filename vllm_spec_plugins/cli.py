"""``vllm-spec-plugins`` command line.

* ``list``: the installed drafter plugins (reads registrations only; imports no model code);
* ``check CHECKPOINT [--target TARGET]``: which plugin serves a draft checkpoint and whether it
  would load, without starting an engine;
* ``doctor``: vLLM version and build, the vLLM symbols the shim relies on, every plugin's health;
* ``new NAME``: write a plugin distribution to start from;
* ``policy FILE``: what the adaptive drafting policy decided in a run;
* ``cpu-env``: the ``LD_PRELOAD`` line for vLLM's CPU build (``eval "$(vllm-spec-plugins cpu-env)"``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from .api import Dim, Drafter, PluginInfo

if TYPE_CHECKING:
    from .owners import Shadow


def _drafter_dict(d: Drafter) -> dict[str, Any]:
    return {
        "architectures": list(d.architectures),
        "model_type": d.model_type,
        "kind": d.kind,
        "model_class": d.model_class,
        "config_class": d.config_class,
        "extra_inputs": [
            {"name": e.name, "source": e.source.value, "shape": None if e.shape is None else list(e.shape),
             "dtype": e.dtype,
             **({"state": e.state} if e.state else {})}
            for e in d.extra_inputs
        ],
        "state": [
            {"name": s.name, "shape": list(s.shape), "dtype": s.dtype, "init": s.init, "on_preempt": s.on_preempt}
            for s in d.state
        ],
        "max_speculative_tokens": d.max_speculative_tokens,
    }


def plugin_dict(p: PluginInfo) -> dict[str, Any]:
    return {
        "name": p.name,
        "entry_point": p.value,
        "distribution": p.dist,
        "version": p.version,
        "hooks": list(p.hooks),
        "drafters": [_drafter_dict(d) for d in p.drafters],
        "error": p.error,
    }


def _shape(shape: tuple[Dim, ...] | None) -> str:
    """``[hidden_size]``; ``[]`` one scalar per row; ``[*]`` not checked (``shape=None``)."""
    if shape is None:
        return "[*]"
    return "[" + ", ".join(str(s) for s in shape) + "]"


def format_table(plugins: list[PluginInfo], shadows: list[Shadow] | None = None) -> str:
    if not plugins:
        return "No vllm-spec-plugins drafter plugins installed (entry-point group 'vllm_spec_plugins')."
    rows = [("PLUGIN", "DISTRIBUTION", "VERSION", "ARCHITECTURES", "EXTRA INPUTS", "STATE")]
    notes = []
    for p in plugins:
        if p.error:
            rows.append((p.name, p.dist or "-", p.version or "-", "BROKEN (see below)", "-", "-"))
            notes.append(f"  {p.name} ({p.value}): {p.error}")
            continue
        for d in p.drafters or (None,):
            if d is None:
                rows.append((p.name, p.dist or "-", p.version or "-", "(none registered)", "-", "-"))
                continue
            archs = ", ".join(d.architectures) + (f" (model_type {d.model_type})" if d.model_type else "")
            extras = ", ".join(f"{e.name}<-{e.state}" if e.state else f"{e.name}<-{e.source.value}{_shape(e.shape)}"
                               for e in d.extra_inputs)
            state = ", ".join(f"{s.name}{_shape(s.shape)} {s.dtype} {s.on_preempt}" for s in d.state)
            rows.append((p.name, p.dist or "-", p.version or "-", f"{archs} [{d.kind}]", extras or "-", state or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    if notes:
        out += ["", "Broken plugins (vLLM still starts; they are skipped unless their draft is requested):"] + notes
    if shadows:
        out += ["", "Names vLLM or Transformers already serve (never registered over theirs):"]
        out += [f"  {s.describe()}" for s in shadows]
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    """The command line: every command and its options (the docs meta-test reads the commands from it)."""
    parser = argparse.ArgumentParser(prog="vllm-spec-plugins", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_list = sub.add_parser("list", help="list installed drafter plugins")
    p_list.add_argument("--json", action="store_true", help="print JSON")
    p_check = sub.add_parser("check", help="check a draft checkpoint against the installed plugins, no engine")
    p_check.add_argument("checkpoint", help="draft checkpoint folder (with config.json)")
    p_check.add_argument("--target", help="target checkpoint folder or id: fill sizes from it, build the engine "
                                          "config as an engine start would, and load the draft on CPU")
    p_check.add_argument("--method", help='the "method" you pass in speculative_config (a plugin name or vLLM\'s)')
    p_check.add_argument("--spec-tokens", type=int,
                         help="num_speculative_tokens (default: the most the draft supports)")
    p_check.add_argument("--json", action="store_true", help="print JSON")
    p_doc = sub.add_parser("doctor", help="vLLM version and build, shim compatibility, plugin health, conflicts")
    p_doc.add_argument("--json", action="store_true", help="print JSON")
    p_new = sub.add_parser("new", help="write a new plugin distribution (a working template) to start from")
    p_new.add_argument("name", help="plugin name, e.g. 'mydraft' (distribution vllm-spec-mydraft)")
    p_new.add_argument("--dir", default=".", help="parent folder (default: the current one)")
    p_pol = sub.add_parser("policy", help="show what the adaptive drafting policy decided in a run "
                           "(the file VLLM_SPEC_PLUGINS_POLICY_STATS named)")
    p_pol.add_argument("stats", help="the policy statistics file (JSON)")
    p_pol.add_argument("--json", action="store_true", help="print JSON")
    sub.add_parser("cpu-env", help="print `export LD_PRELOAD=...` for Intel OpenMP and tcmalloc (vLLM's CPU build); "
                                   "use as: eval \"$(vllm-spec-plugins cpu-env)\"")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cmd == "policy":
        return _policy(args.stats, args.json)
    if args.cmd in ("check", "doctor"):
        import os

        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # keep stdout for the report
        from . import diagnose

        if args.cmd == "check":
            rep = diagnose.check_checkpoint(args.checkpoint, args.target, method=args.method,
                                            num_speculative_tokens=args.spec_tokens)
        else:
            rep = diagnose.doctor()
        if args.json:
            json.dump(rep.to_dict(), sys.stdout, indent=2, default=str)
            print()
        else:
            print(rep.format())
        return 0 if rep.ok else 1
    if args.cmd == "new":
        from .template import write_plugin

        try:
            path = write_plugin(args.name, args.dir)
        except (ValueError, FileExistsError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"wrote {path}\nnext: pip install -e {path} && vllm-spec-plugins list && "
              f"pytest {path}/tests")
        return 0
    if args.cmd == "cpu-env":
        from .cpu_env import hint, shell_line

        line = shell_line()
        if line:
            print(line)
        note = hint()
        if note:
            print(f"# note: {note}", file=sys.stderr)
        return 0
    if args.cmd == "list":
        from .manager import list_plugins
        from .owners import as_dict, find_shadows

        plugins = list_plugins()
        shadows = find_shadows([d for p in plugins for d in p.drafters])
        if args.json:
            rows = []
            for p in plugins:
                row = plugin_dict(p)
                row["shadows"] = [as_dict(s) for s in shadows if s.drafter.plugin == p.name]
                rows.append(row)
            json.dump(rows, sys.stdout, indent=2)
            print()
        else:
            print(format_table(plugins, shadows))
    return 0


def _policy(path: str, as_json: bool) -> int:
    from .policy import format_summary

    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print(f"vllm-spec-plugins policy: cannot read {path}: {e}. Start vLLM with "
              f"VLLM_SPEC_PLUGINS_POLICY_STATS={path} to have the policy write it.", file=sys.stderr)
        return 2
    if as_json:
        json.dump(data, sys.stdout, indent=2)
        print()
    else:
        print(format_summary(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
