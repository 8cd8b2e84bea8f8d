"""``vllm-spec-plugins`` command line: ``list`` the installed drafter plugins."""

from __future__ import annotations

import argparse
import json
import sys

from .api import Drafter, PluginInfo


def _drafter_dict(d: Drafter) -> dict:
    return {
        "architectures": list(d.architectures),
        "model_type": d.model_type,
        "kind": d.kind,
        "model_class": d.model_class,
        "config_class": d.config_class,
        "extra_inputs": [
            {"name": e.name, "source": e.source.value, "shape": list(e.shape), "dtype": e.dtype,
             **({"state": e.state} if e.state else {})}
            for e in d.extra_inputs
        ],
        "state": [
            {"name": s.name, "shape": list(s.shape), "dtype": s.dtype, "init": s.init, "on_preempt": s.on_preempt}
            for s in d.state
        ],
        "max_speculative_tokens": d.max_speculative_tokens,
    }


def plugin_dict(p: PluginInfo) -> dict:
    return {
        "name": p.name,
        "entry_point": p.value,
        "distribution": p.dist,
        "version": p.version,
        "hooks": list(p.hooks),
        "drafters": [_drafter_dict(d) for d in p.drafters],
        "error": p.error,
    }


def _shape(shape: tuple) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def format_table(plugins: list[PluginInfo], shadows: list | None = None) -> str:
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
            extras = ", ".join(f"{e.name}<-{e.state or e.source.value}{_shape(e.shape)}" for e in d.extra_inputs)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm-spec-plugins", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_list = sub.add_parser("list", help="list installed drafter plugins")
    p_list.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    if args.cmd == "list":
        from .manager import list_plugins

        from .owners import as_dict, find_shadows

        plugins = list_plugins()
        shadows = find_shadows([d for p in plugins for d in p.drafters])
        if args.json:
            rows = []
            for p in plugins:
                row = plugin_dict(p)
                row["shadows"] = [as_dict(s) for s in shadows if s.drafter.name == p.name]
                rows.append(row)
            json.dump(rows, sys.stdout, indent=2)
            print()
        else:
            print(format_table(plugins, shadows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
