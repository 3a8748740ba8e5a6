#!/usr/bin/python3
"""plot.py - the peer benchmark as pictures and one page: docs/bench/.

    plot.py ROWS.jsonl [--out docs/bench] [--args "run.sh's arguments"]

Reads rlc_bench's rows (with the peers' rows of tests/bench/peers/peers.py)
and writes, every figure the median over the repeats:

  latency.png   per-cycle latency p50 (bar) and p99 (tick), 1 thread and 16,
                the library against each peer and the floors
  cycles.png    cycles/s, 1 and 16 ways
  handoff.png   contended hand-off p50 and p99
  redlock.png   Redlock over 5 nodes against 1 node, p50 and p99
  cost.png      the server's time per cycle
  results.md    the summary table, the full table (table.py), date, machine

matplotlib comes from PYTHONPATH (run.sh installs it into a venv from PyPI
when /usr/bin/python3 lacks it); without it the page is written and says
the plots were not made.
"""
import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import table  # noqa: E402

# (label, row prefix, colour): the library first, then the peers, then floors.
CLIENTS = [
    ("redlockc C", "c", "#1f5fa8"),
    ("redlockc Python", "py.redlockc", "#3f86d0"),
    ("redlockc asyncio", "aio.redlockc", "#7fb2e5"),
    ("Redisson RLock", "redisson", "#c0392b"),
    ("redsync", "redsync", "#16a085"),
    ("rueidislock", "rueidislock", "#27ae60"),
    ("node-redlock", "node", "#d68910"),
    ("redis-py Lock", "py.redispy", "#8e44ad"),
    ("redis-py asyncio", "aio.redispy", "#b07cc6"),
    ("floor: SET NX PX + del", "bare", "#7f8c8d"),
    ("floor: bare hiredis, our scripts", "limit.fan", "#95a5a6"),
    ("floor: PING (1 round trip)", "ping", "#bdc3c7"),
]
COSTS = [("redlockc", "redlockc"), ("Redisson RLock", "redisson"), ("redsync", "redsync"),
         ("rueidislock", "rueidislock"), ("node-redlock", "node_redlock"),
         ("redis-py Lock", "redispy")]
COLOUR = {p: c for _, p, c in CLIENTS}


def row_name(prefix, workload):
    """The row of a client's workload; None when the client has no such row."""
    if prefix == "limit.fan":
        return {"t1": "limit.fan1", "redlock5": "limit.fan5"}.get(workload)
    if prefix == "ping":
        return "ping" if workload == "t1" else None
    return table.peer_row(prefix, workload)


def med(rows, name, key):
    vals = [r[key] for r in rows.get(name, {}).values()
            if isinstance(r.get(key), (int, float)) and r[key] >= 0]
    return statistics.median(vals) if vals else None


def why_not(rows, name):
    for r in rows.get(name, {}).values():
        if "not_run" in r or "error" in r:
            return r.get("not_run") or r.get("error")
    return None


def series(rows, workload, keys):
    """[(label, prefix, (values...))] of the clients that have all keys."""
    out = []
    for label, prefix, _ in CLIENTS:
        name = row_name(prefix, workload)
        vals = tuple(med(rows, name, k) for k in keys) if name else (None,)
        if all(v is not None for v in vals):
            out.append((label, prefix, vals))
    return out


# ---- pictures -------------------------------------------------------------------

def hbars(ax, data, title, xlabel, log=False, ticks=True):
    """Horizontal bars of data[i][2][0]; a tick at data[i][2][1] when given."""
    labels = [d[0] for d in data]
    ys = range(len(data))
    ax.barh(ys, [d[2][0] for d in data], color=[COLOUR[d[1]] for d in data])
    if ticks and data and len(data[0][2]) > 1:
        # The axis label says "tick p99": a legend box would cover the longest bars.
        ax.scatter([d[2][1] for d in data], ys, marker="|", s=200, color="black", zorder=3)
    for y, d in zip(ys, data):
        ax.text(d[2][0], y, f" {d[2][0]:,.0f}", va="center", fontsize=7)
    ax.set_yticks(list(ys), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel, fontsize=8)
    if log:
        ax.set_xscale("log")
    ax.grid(axis="x", alpha=0.3)


def plots(rows, out, stamp):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []

    def save(fig, name):
        fig.text(0.99, 0.005, stamp, ha="right", fontsize=6, color="gray")
        fig.tight_layout(rect=(0, 0.02, 1, 1))
        fig.savefig(os.path.join(out, name), dpi=110)
        plt.close(fig)
        made.append(name)

    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    for ax, w, t in ((axes[0], "t1", "1 thread, 1 node"), (axes[1], "t16", "16 ways, 1 node")):
        hbars(ax, series(rows, w, ("p50_us", "p99_us")), f"Lock cycle latency, {t}",
              "us per acquire + release (bar p50, tick p99; log)", log=True)
    save(fig, "latency.png")

    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5))
    for ax, w, t in ((axes[0], "t1", "1 thread"), (axes[1], "t16", "16 ways on distinct names")):
        hbars(ax, series(rows, w, ("cycles",)), f"cycles/s, {t}", "acquire + release per second")
    save(fig, "cycles.png")

    fig, ax = plt.subplots(figsize=(8, 4.5))
    hbars(ax, series(rows, "handoff", ("handoff_p50_us", "handoff_p99_us")),
          "Contended hand-off: 8 on one name, 1 ms hold",
          "us from release() to the next holder's acquire() (bar p50, tick p99; log)", log=True)
    save(fig, "handoff.png")

    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8))
    for ax, w, t in ((axes[0], "t1", "1 node"), (axes[1], "redlock5", "Redlock over 5 nodes")):
        data = [d for d in series(rows, w, ("p50_us", "p99_us"))
                if row_name(d[1], "redlock5") and med(rows, row_name(d[1], "redlock5"), "p50_us")]
        hbars(ax, data, f"Cycle latency, 1 thread, {t}", "us (bar p50, tick p99; log)", log=True)
    save(fig, "redlock.png")

    data = [(label, name, (med(rows, f"cost.{name}", "server_us_per_cycle"),))
            for label, name in COSTS if med(rows, f"cost.{name}", "server_us_per_cycle")]
    if data:
        global COLOUR
        COLOUR = dict(COLOUR, redlockc="#1f5fa8", node_redlock=COLOUR["node"],
                      redispy=COLOUR["py.redispy"])
        fig, ax = plt.subplots(figsize=(8, 3.5))
        hbars(ax, data, "The server's time per lock cycle (one client)",
              "redis-server CPU us per acquire + release (its network I/O included)")
        save(fig, "cost.png")
    return made


# ---- the page ----------------------------------------------------------------------

def fmt(v, unit=""):
    return "-" if v is None else f"{table.fmt(v)}{unit}"


def cell(rows, name, key):
    if name is None:
        return "-"
    v = med(rows, name, key)
    if v is not None:
        return fmt(v)
    return "not run" if why_not(rows, name) else "-"


def summary(rows):
    lines = ["| client | 1 thread cycles/s | p50 / p99 us | 16 ways cycles/s | p50 / p99 us "
             "| Redlock 5 nodes p50 us | hand-off p50 / p99 us | server us/cycle |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    cost_of = {"c": "redlockc", "py.redlockc": "redlockc", "redisson": "redisson",
               "redsync": "redsync", "rueidislock": "rueidislock", "node": "node_redlock",
               "py.redispy": "redispy"}
    for label, prefix, _ in CLIENTS:
        t1, t16 = row_name(prefix, "t1"), row_name(prefix, "t16")
        r5, ho = row_name(prefix, "redlock5"), row_name(prefix, "handoff")
        names = [n for n in (t1, t16, r5, ho) if n]
        if not any(n in rows for n in names):
            continue
        cost = cost_of.get(prefix)
        lines.append(
            f"| {label} | {cell(rows, t1, 'cycles')} | {cell(rows, t1, 'p50_us')} / "
            f"{cell(rows, t1, 'p99_us')} | {cell(rows, t16, 'cycles')} | "
            f"{cell(rows, t16, 'p50_us')} / {cell(rows, t16, 'p99_us')} | "
            f"{cell(rows, r5, 'p50_us')} | {cell(rows, ho, 'handoff_p50_us')} / "
            f"{cell(rows, ho, 'handoff_p99_us')} | "
            f"{cell(rows, f'cost.{cost}', 'server_us_per_cycle') if cost else '-'} |")
    nr = sorted({(n, why_not(rows, n)) for n in rows if why_not(rows, n)})
    if "limit.fan1" not in rows:  # rlc_bench prints no row when its capture fails
        nr.append(("limit.*", "rlc_bench printed no limit or bare fan-out rows: it could not "
                   "capture the library's acquire and release commands (its stderr says why)"))
    if nr:
        lines += ["", "Not run:", ""] + [f"- `{n}`: {w}" for n, w in nr]
    return lines


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    except OSError:
        pass
    try:
        redis = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                               timeout=10).stdout.split(" sha=")[0].strip()
    except (OSError, subprocess.SubprocessError):
        redis = "?"
    return os.cpu_count(), cpu, redis


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rows")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "docs", "bench"))
    ap.add_argument("--args", default="", help="run.sh's arguments, for the page")
    a = ap.parse_args()
    meta, rows = table.load(a.rows)
    os.makedirs(a.out, exist_ok=True)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    ncpu, cpu, redis = machine()
    stamp = f"{date}, {ncpu} cores ({cpu}), redlockc {meta.get('library', '?')}"
    try:
        made = plots(rows, a.out, stamp)
        plot_note = ""
    except ImportError as e:
        made, plot_note = [], f"Plots not made: {e} (matplotlib is not installed)."
    full = subprocess.run([sys.executable, os.path.join(HERE, "table.py"), a.rows],
                          capture_output=True, text=True, timeout=60).stdout
    page = [
        "# Benchmark results: libredlockc beside its peers",
        "",
        f"Made by `bash tests/bench/run.sh {a.args}`".rstrip() + " (tests/bench/README.md), "
        f"{date}: libredlockc {meta.get('library', '?')}, every client on the same five "
        "redis-servers in the same run, the repeats interleaved. Figures are medians over "
        f"{meta.get('repeats', '?')} repeats of {meta.get('seconds', '?')} s per workload.",
        "",
        f"Machine: {ncpu} cores, {cpu}; {redis}; {platform.system()} "
        f"{platform.release()}.",
        "",
        "**Noisy figures.** The two cores are shared: by the client under test, the",
        "redis-servers and, on this machine, other engineers' builds and tests running at",
        "the same time. Nothing is pinned. Expect rows to move by 2x between runs; compare",
        "clients within one run (this page), not across runs.",
        "",
        "## Summary",
        "",
        "p50 / p99 are per lock cycle (acquire + release, uncontended, a name per thread) or",
        "per hand-off (a holder's release to the next holder's acquire returning). Server",
        "us/cycle: redis-server CPU over N cycles of one client (tests/bench/peers/peers.py).",
        "",
    ] + summary(rows) + [""]
    if made:
        page += ["## Plots", ""] + [f"![{m[:-4]}]({m})" for m in made] + [""]
    if plot_note:
        page += [plot_note, ""]
    page += ["## The full table (tests/bench/table.py)", "", "```", full.rstrip(), "```", ""]
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("\n".join(page))
    print(f"plot.py: wrote {os.path.join(a.out, 'results.md')} and {len(made)} plots",
          file=sys.stderr)


if __name__ == "__main__":
    main()
