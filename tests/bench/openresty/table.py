#!/usr/bin/python3
"""table.py rows.jsonl - the OpenResty benchmark's table (run.sh)."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
stall = {(r["mod"], r["stall"]): r for r in rows if "stall" in r}
print("1. /b/ping latency on the worker, 16 connections cycling locks (ms)")
print(f"   {'module':<10} {'no stall p50/p99/max':>24} {'Redis stopped 2 s p50/p99/max':>32} {'p99 ratio':>10}")
for mod in ("engine", "blocking"):
    a, b = stall.get((mod, 0)), stall.get((mod, 1))
    if not a or not b:
        print(f"   {mod:<10} not run")
        continue
    ratio = b["p99_ms"] / a["p99_ms"] if a["p99_ms"] else float("nan")
    print(f"   {mod:<10} {a['p50_ms']:>8.2f}/{a['p99_ms']:.2f}/{a['max_ms']:.1f}"
          f" {b['p50_ms']:>15.2f}/{b['p99_ms']:.2f}/{b['max_ms']:.1f} {ratio:>13.2f}x")
print("2. 64 light threads on 64 distinct locks")
for r in rows:
    if r.get("row") == "cycles64":
        print(f"   {r['mod']:<10} {r['cycles_s']:>10.0f} cycles/s   p50 {r['p50_ms']:.2f} ms"
              f"   p99 {r['p99_ms']:.2f} ms   errors {r['errors']}")
print("3. waiting acquires over 100 locks, one worker (engine)")
for r in rows:
    if r.get("row") == "waiters":
        print(f"   {r['waiters']} waiters: parked {r['parked']}, completed {r['completed']},"
              f" failed {r['failed']} in {r['seconds']:.1f} s;"
              f" memory/waiter {r['rss_kb_per_waiter']:.2f} KB RSS"
              f" ({r['lua_kb_per_waiter']:.2f} KB Lua heap);"
              f" hand-off p50 {r['handoff_p50_ms']:.2f} ms p99 {r['handoff_p99_ms']:.2f} ms")
