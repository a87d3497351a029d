"""``arborcc show ALGO``: what an algorithm file contains, at a glance.

Ranks and their buffers, thread blocks per rank (peers, channel, step count), the
channels used, chunks sent per link (src->dst, summed over channels, per loop) and a
histogram of step types. ``--json`` prints the same as one object.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any


def summarize(algo) -> dict[str, Any]:
    """The facts ``show`` prints about an :class:`~arborcc.ir.model.Algorithm`, as a JSON-ready dict."""
    from arborcc.ir.model import Op

    types: Counter[str] = Counter()
    links: dict[tuple[int, int], list[int]] = {}
    channels: set[int] = set()
    ranks = []
    for prog in sorted(algo.ranks, key=lambda p: p.rank):
        tbs = []
        for tb in prog.threadblocks:
            channels.add(tb.channel)
            sent = 0
            messages = 0
            for st in tb.steps:
                types[st.op.value] += 1
                if st.op.sends:
                    sent += st.count
                    messages += 1
            if tb.send >= 0 and messages:
                link = links.setdefault((prog.rank, tb.send), [0, 0])
                link[0] += sent
                link[1] += messages
            tbs.append({"id": tb.id, "send": tb.send, "recv": tb.recv, "channel": tb.channel,
                        "steps": len(tb.steps)})
        ranks.append({"rank": prog.rank, "input_chunks": prog.input_chunks,
                      "output_chunks": prog.output_chunks, "scratch_chunks": prog.scratch_chunks,
                      "threadblocks": tbs})
    order = [op.value for op in Op]
    return {
        "name": algo.name, "collective": algo.collective, "num_ranks": algo.num_ranks,
        "chunks_per_loop": algo.chunks_per_loop, "protocol": algo.protocol.value,
        "inplace": algo.inplace, "outofplace": algo.outofplace, "root": algo.root,
        "min_bytes": algo.min_bytes, "max_bytes": algo.max_bytes,
        "channels": sorted(channels),
        "threadblocks": sum(len(r["threadblocks"]) for r in ranks),
        "steps": sum(types.values()),
        "step_types": {k: types[k] for k in order if types[k]},
        "links": [{"src": s, "dst": d, "chunks": c, "messages": m} for (s, d), (c, m) in sorted(links.items())],
        "ranks": ranks,
    }


def register(p: argparse.ArgumentParser) -> None:
    p.description = "Print what an algorithm (MSCCL XML or arborcc JSON) contains."
    p.add_argument("algorithm", metavar="ALGO", help="algorithm file: .xml (MSCCL) or .json (arborcc)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--max-ranks", type=int, default=32, metavar="N",
                   help="list thread blocks of at most N ranks (default 32; 0 = all)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from arborcc.cli.output import print_json
    from arborcc.ir.load import load_algorithm

    algo = load_algorithm(args.algorithm)
    s = summarize(algo)
    if args.json:
        print_json(s)
        return 0
    mode = "/".join(m for m, on in (("in-place", s["inplace"]), ("out-of-place", s["outofplace"])) if on) or "never selectable"
    root = f", root {s['root']}" if s["root"] is not None else ""
    sizes = f", {s['min_bytes']}..{s['max_bytes'] or 'any'} bytes" if s["min_bytes"] or s["max_bytes"] else ""
    print(f"{s['name'] or '(unnamed)'}: {s['collective']} on {s['num_ranks']} ranks{root}, "
          f"{s['chunks_per_loop']} chunks per loop, {s['protocol']}, {mode}{sizes}")
    print(f"channels: {len(s['channels'])} ({', '.join(map(str, s['channels']))})")
    hist = ", ".join(f"{k} {v}" for k, v in s["step_types"].items())
    print(f"thread blocks: {s['threadblocks']}; steps: {s['steps']} ({hist or 'none'})")
    limit = args.max_ranks if args.max_ranks > 0 else len(s["ranks"])
    for r in s["ranks"][:limit]:
        print(f"rank {r['rank']}: chunks in {r['input_chunks']} out {r['output_chunks']} scratch "
              f"{r['scratch_chunks']}; {len(r['threadblocks'])} thread block(s)")
        for tb in r["threadblocks"]:
            send = f"send {tb['send']}" if tb["send"] >= 0 else "send -"
            recv = f"recv {tb['recv']}" if tb["recv"] >= 0 else "recv -"
            print(f"  tb {tb['id']}: {send}, {recv}, channel {tb['channel']}, {tb['steps']} steps")
    if len(s["ranks"]) > limit:
        print(f"... {len(s['ranks']) - limit} more ranks (--max-ranks 0 lists all)")
    print(f"links (chunks / messages sent per loop): {len(s['links'])}")
    for link in s["links"][: max(limit * 4, 0) or None]:
        print(f"  {link['src']}->{link['dst']}: {link['chunks']} chunks in {link['messages']} messages")
    if len(s["links"]) > limit * 4:
        print(f"  ... {len(s['links']) - limit * 4} more links")
    return 0
