#!/usr/bin/python3
"""table.py - turns rlc_bench's rows (JSON lines) into the benchmark table.

    table.py ROWS.jsonl

Every figure is the median over the repeats, with the spread [min-max].
A ratio is taken within each repeat (both sides measured in the same
minute, against the same servers), and its median and spread are shown.
Targets are those of DESIGN.md section 7. A row that did not run says so and
why; nothing is ever filled in.
"""
import json
import math
import statistics
import sys
from collections import defaultdict


def load(path):
    rows = defaultdict(dict)  # row name -> rep -> row
    meta = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                r = json.loads(line)
            except ValueError:
                continue
            name = r.get("row")
            if name == "meta":
                meta = r
            elif name:
                rows[name][r.get("rep", 0)] = r
    return meta, rows


def fmt(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    a = abs(v)
    if v == int(v) and a < 1000:
        return f"{int(v)}"
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def spread(vals):
    """'median [min-max]' of the values, or '-'."""
    vals = [v for v in vals if v is not None and v >= 0]
    if not vals:
        return "-", None
    m = statistics.median(vals)
    if len(vals) == 1:
        return fmt(m), m
    return f"{fmt(m)} [{fmt(min(vals))}-{fmt(max(vals))}]", m


COLW = 25  # one "median [min-max]" cell


class Table:
    def __init__(self, meta, rows):
        self.meta, self.rows = meta, rows
        self.out = []
        self.verdicts = []

    def values(self, name, key):
        if key == "cpu_us_per_cycle":  # derived: the client's CPU time per cycle
            return [r["client_cpu_pct"] * 1e4 / r["cycles"] for r in self.rows.get(name, {}).values()
                    if r.get("cycles", 0) > 0 and "client_cpu_pct" in r]
        return [r.get(key) for r in self.rows.get(name, {}).values()
                if isinstance(r.get(key), (int, float))]

    def ratio(self, a, ka, b, kb):
        """Per-repeat a.ka / b.kb: both measured in the same repeat."""
        ra, rb = self.rows.get(a, {}), self.rows.get(b, {})
        out = []
        for rep, x in ra.items():
            y = rb.get(rep)
            if y and isinstance(x.get(ka), (int, float)) and isinstance(y.get(kb), (int, float)) \
                    and y[kb] > 0 and x[ka] >= 0:
                out.append(x[ka] / y[kb])
        return out

    def not_run(self, name):
        for r in self.rows.get(name, {}).values():
            if "not_run" in r:
                return r["not_run"]
            if "error" in r:
                return r["error"]
        return None

    def section(self, title, cols):
        """cols: the keys (and their headings) this section's rows show."""
        self.cols = cols
        self.out.append(("section", title, [h for _, h in cols]))

    def line(self, label, name, target=None, cols=None):
        """target: (text, values, predicate[, unit]): values are per-repeat
        ratios (unit "x") or raw figures (another unit); the verdict is taken
        on their median."""
        cols = cols or self.cols
        if not any(self.values(name, k) for k, _ in cols):
            why = self.not_run(name) or "no figures"
            self.out.append(("row", label, [f"not run: {why}"], "", "", ""))
            if target and not target[0].startswith("("):
                self.verdicts.append((label, target[0], "not run"))
            return
        cells = [spread(self.values(name, k))[0] for k, _ in cols]
        cpu, srv = self.values(name, "client_cpu_pct"), self.values(name, "server_cpu_pct")
        cpu_txt = f"{statistics.median(cpu):.0f}%" if cpu else ""
        cpu_txt += f"/{statistics.median(srv):.0f}%" if srv else ""
        ttxt = verdict = ""
        if target:
            text, vals, ok = target[:3]
            unit = target[3] if len(target) > 3 else "x"
            rtxt, m = spread(vals)
            verdict = "-" if m is None else "" if text.startswith("(") \
                else ("met" if ok(m) else "MISSED")
            ttxt = f"{text}: {rtxt + unit if m is not None else '-'}"
            if not text.startswith("("):
                self.verdicts.append((label, ttxt, verdict))
        self.out.append(("row", label, cells, cpu_txt, ttxt, verdict))

    def render(self):
        w = max([len(o[1]) for o in self.out if o[0] == "row"] + [10]) + 2
        lines = []
        for o in self.out:
            if o[0] == "section":
                lines += ["", o[1],
                          " " * w + "".join(f"{h:{COLW}}" for h in o[2]) + f"{'CPU c/s':10}"
                          "vs target / peer"]
                continue
            _, label, cells, cpu, tgt, verdict = o
            if len(cells) == 1 and cells[0].startswith("not run"):
                lines.append(f"  {label:{w - 2}}{cells[0]}")
                continue
            body = "".join(f"{c:{COLW - 1}} " for c in cells)
            lines.append(f"  {label:{w - 2}}{body}{cpu:10}{tgt}{'  ' + verdict if verdict else ''}"
                         .rstrip())
        return lines


def build(meta, rows):
    t = Table(meta, rows)
    cyc = [("cycles", "cycles/s"), ("p50_us", "p50 us"), ("p99_us", "p99 us")]

    t.section("Round trip (measured just before the hand-off)",
              [("p50_us", "p50 us"), ("p99_us", "p99 us"), ("rps", "req/s")])
    t.line("PING, 1 conn (hiredis)", "ping")

    t.section("1. Limit: redis-benchmark with the library's acquire + release scripts "
              "(client = redis-benchmark)",
              [("cycles", "cycles/s"), ("p50_us", "p50 us (acq+rel)"),
               ("acquire_rps", "acquire/s"), ("release_rps", "release/s"),
               ("release_full_pct", "% full rel"), ("release_legacy_pct", "% legacy rel")])
    t.line("limit, 1 conn", "limit.c1")
    t.line("limit, 16 conns", "limit.c16")

    t.section("1b. Floor under Redlock: bare hiredis, scripts written to all N nodes, "
              "then N replies read", [("cycles", "cycles/s"), ("p50_us", "p50 us"),
                                      ("p99_us", "p99 us")])
    t.line("bare fan-out, 1 node", "limit.fan1")
    t.line("bare fan-out, 5 nodes", "limit.fan5",
           ("(info) p50 vs 1 node", t.ratio("limit.fan5", "p50_us", "limit.fan1", "p50_us"),
            None))

    t.section("2. C API, uncontended acquire+release (watchdog lease, a name per thread)",
              cyc + [("cpu_us_per_cycle", "client CPU us/cycle")])
    t.line("C, 1 thread", "c.t1",
           (">=0.9x limit 1 conn", t.ratio("c.t1", "cycles", "limit.c1", "cycles"),
            lambda m: m >= 0.9))
    # issue 15: the blocking API on one thread against bare hiredis sending
    # the same two scripts (the 1-node fan-out row), same run
    t.line("C, 1 thread", "c.t1",
           (">=0.95x bare hiredis (1b)", t.ratio("c.t1", "cycles", "limit.fan1", "cycles"),
            lambda m: m >= 0.95), cols=[("cycles", "cycles/s")])
    t.line("C, 16 threads", "c.t16",
           (">=0.85x limit 16 conns", t.ratio("c.t16", "cycles", "limit.c16", "cycles"),
            lambda m: m >= 0.85))
    t.line("C, 16 threads", "c.t16",
           (">=1.0x node-redlock 16 workers", t.ratio("c.t16", "cycles", "node.w16", "cycles"),
            lambda m: m >= 1.0), cols=[("cycles", "cycles/s")])
    for n in sorted((n for n in rows if n.startswith("c.t16.pool")), key=lambda n: int(n[10:])):
        t.line(f"C, 16 threads, pool_size={n[10:]}", n,
               ("(info) vs limit 16 conns", t.ratio(n, "cycles", "limit.c16", "cycles"), None))
    t.line("C, Redlock 3 nodes", "c.redlock3",
           ("(info) p50 vs 1 node", t.ratio("c.redlock3", "p50_us", "c.t1", "p50_us"), None))
    t.line("C, Redlock 5 nodes", "c.redlock5",
           ("p50 <=1.25x 1 node", t.ratio("c.redlock5", "p50_us", "c.t1", "p50_us"),
            lambda m: m <= 1.25))
    t.line("C, Redlock 5 nodes", "c.redlock5",
           ("(info) p50 vs bare fan-out 5 nodes (1b)",
            t.ratio("c.redlock5", "p50_us", "limit.fan5", "p50_us"), None),
           cols=[("p50_us", "p50 us")])

    t.section("2b. Acquire alone, 1 thread (rlc_lock_acquire of the cycles above)",
              [("acq_p50_us", "acquire p50 us"), ("acq_p99_us", "acquire p99 us")])
    t.line("C, 1 node", "c.t1")
    for n in (3, 5):
        row = f"c.redlock{n}"
        t.line(f"C, Redlock {n} nodes", row,
               ("(info) p50 vs 1 node", t.ratio(row, "acq_p50_us", "c.t1", "acq_p50_us"), None))

    t.section("3. Contended hand-off: 8 threads, one name, 1 ms hold; release() -> next acquire()",
              [("handoff_p50_us", "p50 us"), ("handoff_p99_us", "p99 us"),
               ("cycles", "hand-offs/s")])
    t.line("C", "c.handoff",
           ("p50 <=3 round trips", t.ratio("c.handoff", "handoff_p50_us", "ping", "p50_us"),
            lambda m: m <= 3, " RTT"))
    t.line("node-redlock (retryDelay 200)", "node.handoff",
           ("(info)", t.ratio("node.handoff", "handoff_p50_us", "ping", "p50_us"), None, " RTT"))

    locks = t.values("c.watchdog", "locks")
    t.section(f"4. Watchdog at scale: one client holding {fmt(locks[0]) if locks else '?'} "
              "watchdog locks, lease 3 s",
              [("renew_calls_per_s", "renew calls/s"), ("keys_renewed_per_s", "keys renewed/s"),
               ("calls_per_round", "calls per round")])
    t.line("renewals", "c.watchdog",
           ("batched, ~1 pipeline per round",
            t.ratio("c.watchdog", "keys_per_round", "c.watchdog", "calls_per_round"),
            lambda m: m >= 100, " keys/call"))
    lost = t.values("c.watchdog", "lost")
    t.line("client process, lost", "c.watchdog",
           ("0 lost (worst repeat)", [max(lost)] if lost else [], lambda m: m == 0, " lost"),
           cols=[("client_cpu_pct", "CPU %"), ("rounds", "rounds"), ("lost", "lost")])

    t.section("5. Python: redlockc vs redis-py's Lock (tests/bench/bench_python.py)", cyc)
    py = sorted(n for n in rows if n.startswith("py."))
    if not py:
        t.line("python", "python")
    for n in py:
        target = None
        kind = n.split(".")[-1]
        other = f"py.redispy.{kind}"
        need = {"t1": 1.0, "t16": 5.0}.get(kind)
        if n.startswith("py.redlockc.") and need and other in rows:
            target = (f">={need:g}x redis-py", t.ratio(n, "cycles", other, "cycles"),
                      lambda m, need=need: m >= need)
        cols = cyc if t.values(n, "cycles") and not t.values(n, "handoff_p50_us") else \
            [("handoff_p50_us", "hand-off p50 us"), ("handoff_p99_us", "p99 us"),
             ("cycles", "hand-offs/s")]
        t.line(n[3:], n, target, cols=cols)

    t.section("6. Peer: node-redlock v5 + ioredis (installed from npm at run time)",
              cyc + [("cpu_us_per_cycle", "client CPU us/cycle")])
    t.line("node, 1 worker", "node.t1",
           ("(info) vs limit 1 conn", t.ratio("node.t1", "cycles", "limit.c1", "cycles"), None))
    t.line("node, 16 async workers", "node.w16",
           ("(info) vs limit 16 conns", t.ratio("node.w16", "cycles", "limit.c16", "cycles"),
            None))
    t.line("node, Redlock 5 nodes", "node.redlock5",
           ("(info) p50 vs 1 node", t.ratio("node.redlock5", "p50_us", "node.t1", "p50_us"),
            None))
    peers(t, cyc)
    return t


# The peers of tests/bench/peers (peers.py), beside the library's own rows.
PEERS = [("redlockc (C)", "c"), ("redlockc (Python)", "py.redlockc"),
         ("redlockc.asyncio", "aio.redlockc"), ("Redisson RLock", "redisson"),
         ("redsync", "redsync"), ("rueidislock", "rueidislock"), ("node-redlock", "node"),
         ("redis-py Lock", "py.redispy"), ("redis-py asyncio Lock", "aio.redispy"),
         ("floor: SET NX PX + del script", "bare")]
# Row suffixes by workload: the library's C rows and node-redlock's differ.
SUFFIX = {"t16": {"node": "w16"}}
COSTS = [("redlockc (C, Python)", "redlockc"), ("Redisson RLock", "redisson"),
         ("redsync", "redsync"), ("rueidislock", "rueidislock"),
         ("node-redlock", "node_redlock"), ("redis-py Lock", "redispy")]


def peer_row(prefix, workload):
    return f"{prefix}.{SUFFIX.get(workload, {}).get(prefix, workload)}"


def peers(t, cyc):
    if not any(n.startswith(("redisson.", "redsync.", "rueidislock.", "cost.")) for n in t.rows):
        return  # a run without tests/bench/peers (--quick)
    hand = [("handoff_p50_us", "p50 us"), ("handoff_p99_us", "p99 us"),
            ("cycles", "hand-offs/s")]
    for w, title, cols in (
            ("t1", "1 thread (task, worker), 1 node", cyc),
            ("t16", "16 threads (goroutines, async workers) on distinct names, 1 node", cyc),
            ("redlock5", "Redlock over 5 nodes, 1 thread", cyc),
            ("handoff", "contended hand-off, 8 on one name, 1 ms hold", hand)):
        t.section(f"8. Peers, same servers, same run: {title}", cols)
        for label, prefix in PEERS:
            row = peer_row(prefix, w)
            if row in t.rows:
                t.line(label, row)
    t.section("8. Peers: the server's time per cycle (redis-server CPU over N cycles, 1 client)",
              [("server_us_per_cycle", "server us/cycle"), ("calls_per_cycle", "commands/cycle")])
    for label, name in COSTS:
        if f"cost.{name}" in t.rows:
            t.line(label, f"cost.{name}")


NOTES = """
Notes
  * Limit: redis-benchmark runs one command per test, so each script is measured alone
    doing the work it does in a real cycle, and cycles/s = 1/(1/acq + 1/rel) on the same
    number of connections. The commands (SHAs, keys, lease, field) are captured from the
    library with MONITOR. Each __rand_int__ gets its own value, so lock, attempts hash
    and attempt id are independent draws. Acquire: all new (the new-hold path), one
    token key. Release: on holds made beforehand (lock hash + attempts hash with epoch
    and the record of the attempt the release names), 16x more than calls. "% full rel"
    = freed on the attempts path as in a real cycle; "% legacy rel" = freed on the path
    for a missing attempts hash (about as much work); the rest return early, which
    flatters the limit, never us. Release upto is "" (one level): a real last-level
    release also reads the attempts hash once more, so the limit is a little high.
    p50* = acquire p50 + release p50 (approximate).
  * Hand-off: time from release() to another thread's acquire() returning. Each holder
    holds 1 ms and a releaser waits until someone else took the lock, so every
    hand-off goes to a thread that was waiting. "round trips" = hand-off p50 / PING p50.
  * CPU c/s: the client process's and the busiest redis-server's CPU, % of one core.
    The machine has %(cores)s cores; the client, the peers and redis-server share them and
    nothing is pinned. On this VM a wake-up across cores costs far more than on the same
    core, so round trips vary with where the scheduler puts the two processes: this is
    why figures are medians of interleaved repeats.
"""


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: table.py ROWS.jsonl")
    meta, rows = load(sys.argv[1])
    t = build(meta, rows)
    print(f"libredlockc benchmark: library {meta.get('library', '?')}, redis "
          f"{meta.get('redis', '?')}, {meta.get('cores', '?')} cores, "
          f"{meta.get('repeats', '?')} repeats x {meta.get('seconds', '?')} s per workload "
          f"(watchdog {meta.get('wd_seconds', '?')} s)")
    if meta.get("library_path"):
        print(f"measured: {meta['library_path']}")
    print()
    for line in t.render():
        print(line)
    print()
    print("Targets (DESIGN.md section 7), on the medians of per-repeat ratios")
    for label, what, verdict in t.verdicts:
        print(f"  {verdict:8} {label}: {what}")
    print(NOTES.replace("%(cores)s", str(meta.get("cores", "?"))).rstrip())


if __name__ == "__main__":
    main()
