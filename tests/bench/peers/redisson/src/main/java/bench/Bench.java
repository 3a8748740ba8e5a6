package bench;

import java.lang.management.ManagementFactory;
import java.net.URI;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.redisson.Redisson;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;

/**
 * Redisson's RLock, the Java peer of tests/bench, on the workloads of rlc_bench
 * and against the same servers (tests/bench/peers/peers.py runs it):
 *
 * <pre>
 *   redisson.t1        1 thread, 1 node: lock() + unlock() cycles (watchdog lease)
 *   redisson.t16       16 threads on distinct names, one RedissonClient
 *   redisson.handoff   8 threads on one name; time from a holder's unlock() to the
 *                      next holder's lock() returning (the rules of
 *                      tests/bench/handoff.c: a holder holds 1 ms, a releaser
 *                      waits until someone else took the lock)
 *   redisson.redlock5  not run: RedissonRedLock is deprecated
 *   redisson.cost      exactly --cycles cycles on one name (peers.py reads the
 *                      server's INFO commandstats around the whole process)
 *
 *   java -cp ... bench.Bench --nodes redis://h:p,... --seconds S
 *        [--workloads t1,t16,redlock5,handoff] [--cycles N]
 * </pre>
 *
 * One JSON object per line on stdout. It never judges speed.
 */
public final class Bench {
    static final int WARMUP = 200;
    static final long WARMUP_T1_NS = 1_000_000_000L; // the JIT's turn, t1 only
    static final long HOLD_NS = 1_000_000L;
    static final long PATIENCE_NS = 2_000_000_000L;
    static final int MAX_SAMPLES = 1 << 20;
    static final int MAX_ERRORS = 1000;

    public static void main(String[] argv) throws Exception {
        String nodes = null, workloads = "t1,t16,redlock5,handoff";
        double seconds = 3;
        int cycles = 2000;
        for (int i = 0; i + 1 < argv.length; i += 2) {
            switch (argv[i]) {
                case "--nodes" -> nodes = argv[i + 1];
                case "--seconds" -> seconds = Double.parseDouble(argv[i + 1]);
                case "--workloads" -> workloads = argv[i + 1];
                case "--cycles" -> cycles = Integer.parseInt(argv[i + 1]);
                default -> throw new IllegalArgumentException("unknown argument " + argv[i]);
            }
        }
        if (nodes == null || !(seconds > 0 && seconds <= 600))
            throw new IllegalArgumentException("need --nodes and 0 < --seconds <= 600");
        // A hard bound on the whole run, whatever happens to the servers.
        long bound = (long) ((seconds * 8 + 60) * 1000);
        Thread guard = new Thread(() -> {
            try {
                Thread.sleep(bound);
                System.err.println("Bench: out of time");
                Runtime.getRuntime().halt(3);
            } catch (InterruptedException e) {
                // finished in time
            }
        });
        guard.setDaemon(true);
        guard.start();

        String first = nodes.split(",")[0];
        RedissonClient client = connect(first);
        try {
            for (String w : workloads.split(",")) {
                switch (w) {
                    case "t1" -> cycles(client, "redisson.t1", 1, seconds);
                    case "t16" -> cycles(client, "redisson.t16", 16, seconds);
                    case "handoff" -> handoff(client, 8, seconds);
                    case "cost" -> cost(client, cycles);
                    case "redlock5" -> emit("redisson.redlock5", "not_run",
                            "RedissonRedLock (Redlock over independent masters) is deprecated in Redisson");
                    default -> emit("redisson." + w, "error", "unknown workload");
                }
            }
        } finally {
            client.shutdown(0, 2, TimeUnit.SECONDS);
        }
        System.exit(0);
    }

    static RedissonClient connect(String uri) {
        URI u = URI.create(uri);
        Config c = new Config();
        c.useSingleServer().setAddress("redis://" + u.getHost() + ":" + u.getPort());
        return Redisson.create(c);
    }

    // ---- measuring ----------------------------------------------------------

    static long cpuNs() {
        var os = ManagementFactory.getOperatingSystemMXBean();
        return os instanceof com.sun.management.OperatingSystemMXBean s ? s.getProcessCpuTime() : 0;
    }

    /** Latencies in ns, bounded; past the cap it only counts. */
    static final class Samples {
        long[] v = new long[1024];
        int n;
        long count;
        int errors;

        synchronized void add(long ns) {
            count++;
            if (n == MAX_SAMPLES)
                return;
            if (n == v.length)
                v = Arrays.copyOf(v, v.length * 2);
            v[n++] = ns;
        }

        synchronized boolean fail(String row, Exception e) {
            if (errors++ == 0)
                System.err.println(row + ": " + e);
            return errors < MAX_ERRORS;
        }

        synchronized double us(double q) {
            if (n == 0)
                return -1;
            long[] s = Arrays.copyOf(v, n);
            Arrays.sort(s);
            return s[(int) Math.round(q * (n - 1))] / 1000.0;
        }
    }

    static void cycle(RLock l) {
        l.lock();
        l.unlock();
    }

    static void cycles(RedissonClient client, String row, int threads, double seconds)
            throws InterruptedException {
        long w0 = System.nanoTime();
        for (int t = 0; t < threads; t++) {
            RLock l = client.getLock("bench:" + row + ":" + t);
            for (int i = 0; i < WARMUP || (threads == 1 && i < 20 * WARMUP
                    && System.nanoTime() - w0 < WARMUP_T1_NS); i++)
                cycle(l);
        }
        Samples s = new Samples();
        long cpu0 = cpuNs(), t0 = System.nanoTime(), end = t0 + (long) (seconds * 1e9);
        List<Thread> ts = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            RLock l = client.getLock("bench:" + row + ":" + t);
            Thread th = new Thread(() -> {
                for (long a = System.nanoTime(); a < end;) {
                    try {
                        cycle(l);
                    } catch (RuntimeException e) {
                        if (!s.fail(row, e))
                            return;
                        a = System.nanoTime();
                        continue;
                    }
                    long b = System.nanoTime();
                    s.add(b - a);
                    a = b;
                }
            });
            ts.add(th);
            th.start();
        }
        for (Thread th : ts)
            th.join(); // bounded: every loop ends at `end` (each lock() waits for a free name)
        long wall = System.nanoTime() - t0;
        emit(String.format(Locale.ROOT,
                "{\"row\":\"%s\",\"threads\":%d,\"nodes\":1,\"cycles\":%.1f,\"p50_us\":%.1f,"
                        + "\"p90_us\":%.1f,\"p99_us\":%.1f,\"errors\":%d,\"client_cpu_pct\":%.1f}",
                row, threads, s.count / (wall / 1e9), s.us(0.5), s.us(0.9), s.us(0.99), s.errors,
                100.0 * (cpuNs() - cpu0) / wall));
    }

    /** Every hand-off goes to a thread that was waiting (see handoff.c). */
    static void handoff(RedissonClient client, int threads, double seconds)
            throws InterruptedException {
        String row = "redisson.handoff";
        RLock lock = client.getLock("bench:handoff");
        cycle(lock);
        Object mu = new Object();
        int[] holder = {-1};
        long[] releasedAt = {0};
        AtomicInteger timeouts = new AtomicInteger();
        Samples s = new Samples();
        long cpu0 = cpuNs(), t0 = System.nanoTime(), end = t0 + (long) (seconds * 1e9);
        List<Thread> ts = new ArrayList<>();
        for (int id = 0; id < threads; id++) {
            final int me = id;
            Thread th = new Thread(() -> {
                while (System.nanoTime() < end) {
                    try {
                        // Waits at most until the window's end plus the patience.
                        long left = end + PATIENCE_NS - System.nanoTime();
                        if (left <= 0 || !lock.tryLock(left, TimeUnit.NANOSECONDS))
                            return;
                    } catch (InterruptedException | RuntimeException e) {
                        if (!s.fail(row, e instanceof RuntimeException r ? r : new RuntimeException(e)))
                            return;
                        continue;
                    }
                    long got = System.nanoTime();
                    synchronized (mu) {
                        if (holder[0] >= 0 && holder[0] != me && got < end)
                            s.add(got - releasedAt[0]);
                        holder[0] = me;
                        mu.notifyAll();
                    }
                    java.util.concurrent.locks.LockSupport.parkNanos(HOLD_NS);
                    synchronized (mu) {
                        releasedAt[0] = System.nanoTime();
                    }
                    try {
                        lock.unlock();
                    } catch (RuntimeException e) {
                        if (!s.fail(row, e))
                            return;
                    }
                    waitForTaker(mu, holder, me, end, timeouts);
                }
            });
            ts.add(th);
            th.start();
        }
        for (Thread th : ts)
            th.join();
        long wall = end - t0;
        emit(String.format(Locale.ROOT,
                "{\"row\":\"%s\",\"threads\":%d,\"cycles\":%.1f,\"handoff_p50_us\":%.1f,"
                        + "\"handoff_p90_us\":%.1f,\"handoff_p99_us\":%.1f,\"errors\":%d,"
                        + "\"patience_timeouts\":%d,\"client_cpu_pct\":%.1f}",
                row, threads, s.count / (wall / 1e9), s.us(0.5), s.us(0.9), s.us(0.99), s.errors,
                timeouts.get(), 100.0 * (cpuNs() - cpu0) / (System.nanoTime() - t0)));
    }

    static void waitForTaker(Object mu, int[] holder, int me, long end, AtomicInteger timeouts) {
        long limit = System.nanoTime() + PATIENCE_NS;
        synchronized (mu) {
            while (holder[0] == me) {
                long now = System.nanoTime();
                if (now >= end)
                    return;
                if (now >= limit) {
                    timeouts.incrementAndGet();
                    return;
                }
                try {
                    mu.wait(Math.max(1, Math.min(limit, end) - now) / 1_000_000 + 1);
                } catch (InterruptedException e) {
                    return;
                }
            }
        }
    }

    static void cost(RedissonClient client, int n) {
        RLock l = client.getLock("bench:cost");
        int errors = 0;
        long t0 = System.nanoTime();
        for (int i = 0; i < n && System.nanoTime() - t0 < 60_000_000_000L; i++) {
            try {
                cycle(l);
            } catch (RuntimeException e) {
                errors++;
            }
        }
        emit(String.format(Locale.ROOT, "{\"row\":\"redisson.cost\",\"n\":%d,\"errors\":%d}", n, errors));
    }

    static void emit(String row, String key, String why) {
        emit("{\"row\":\"" + row + "\",\"" + key + "\":\"" + why.replace("\"", "'") + "\"}");
    }

    static void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }
}
