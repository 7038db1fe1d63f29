// The Curator contender of the fencelock bench: Apache Curator's InterProcessMutex driven through
// its public API, answering the same jobs as bench/lib/worker.mjs, as JSON lines (one job a line
// on stdin, one reply a line on stdout). Built at bench time with javac against Debian's
// libcurator-recipes-java (see bench/lib/env.mjs).
//
// Times are System.nanoTime() in milliseconds: on Linux that is CLOCK_MONOTONIC, the clock the
// Node workers read with process.hrtime.bigint(), so the parent lines up events of both.
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class CuratorBench {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static String connect;
  private static String base;
  private static final List<CuratorFramework> clients = new ArrayList<>();

  private CuratorBench() {}

  static double nowMs() {
    return System.nanoTime() / 1e6;
  }

  @SuppressWarnings("unchecked")
  public static void main(String[] args) throws Exception {
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isBlank()) continue;
      Map<String, Object> job = JSON.readValue(line, Map.class);
      Map<String, Object> reply;
      try {
        reply = handle(job);
      } catch (Exception e) {
        reply = new HashMap<>();
        reply.put("type", "error");
        reply.put("message", e.toString());
      }
      System.out.println(JSON.writeValueAsString(reply));
      System.out.flush();
      if ("close".equals(job.get("type"))) System.exit(0);
    }
  }

  @SuppressWarnings("unchecked")
  private static Map<String, Object> handle(Map<String, Object> job) throws Exception {
    String type = (String) job.get("type");
    Map<String, Object> reply = new LinkedHashMap<>();
    switch (type) {
      case "init": {
        Map<String, Object> ctx = (Map<String, Object>) job.get("ctx");
        Map<String, Object> endpoints = (Map<String, Object>) ctx.get("endpoints");
        connect = String.join(",", (List<String>) endpoints.get("zookeeper"));
        base = "/" + ctx.get("prefix") + "-curator";
        reply.put("type", "ready");
        return reply;
      }
      case "open":
        openClients(((Number) job.get("clients")).intValue());
        reply.put("type", "opened");
        return reply;
      case "uncontended":
        return uncontended(job);
      case "contended":
        return contended(job);
      case "close":
        for (CuratorFramework client : clients) client.close();
        reply.put("type", "closed");
        return reply;
      default:
        throw new IllegalArgumentException("unknown job " + type);
    }
  }

  private static void openClients(int count) throws InterruptedException {
    for (int i = 0; i < count; i++) {
      // Curator's documented default policy; session and connection timeouts at their defaults.
      CuratorFramework client =
          CuratorFrameworkFactory.newClient(connect, new ExponentialBackoffRetry(1000, 3));
      client.start();
      if (!client.blockUntilConnected(15, TimeUnit.SECONDS)) {
        throw new IllegalStateException("ZooKeeper did not connect within 15 s");
      }
      // Warm up as the Node workers do: a few pairs on a key of its own before any measurement.
      InterProcessMutex warm =
          new InterProcessMutex(client, base + "/warm-" + ProcessHandle.current().pid() + "-" + i);
      for (int pair = 0; pair < 5; pair++) {
        try {
          warm.acquire();
          warm.release();
        } catch (Exception e) {
          throw new IllegalStateException("warm-up failed", e);
        }
      }
      clients.add(client);
    }
  }

  @SuppressWarnings("unchecked")
  private static Map<String, Object> uncontended(Map<String, Object> job) throws Exception {
    if (clients.isEmpty()) openClients(1);
    CuratorFramework client = clients.get(0);
    List<Number> levels = (List<Number>) job.get("levels");
    double warmupMs = ((Number) job.get("warmupMs")).doubleValue();
    double durationMs = ((Number) job.get("durationMs")).doubleValue();
    String keyTag = (String) job.get("keyTag");
    List<Map<String, Object>> results = new ArrayList<>();
    for (Number level : levels) {
      int concurrency = level.intValue();
      double measureFrom = nowMs() + warmupMs;
      double measureTo = measureFrom + durationMs;
      AtomicInteger pairs = new AtomicInteger();
      AtomicInteger errors = new AtomicInteger();
      List<Double> latencies = new ArrayList<>();
      List<Thread> threads = new ArrayList<>();
      for (int loop = 0; loop < concurrency; loop++) {
        final int l = loop;
        Thread thread =
            new Thread(
                () -> {
                  Map<Integer, InterProcessMutex> mutexes = new HashMap<>();
                  List<Double> own = new ArrayList<>();
                  for (int i = 0; nowMs() < measureTo; i++) {
                    int k = i % 64;
                    InterProcessMutex mutex =
                        mutexes.computeIfAbsent(
                            k,
                            x ->
                                new InterProcessMutex(
                                    client,
                                    base + "/" + keyTag + "-c" + concurrency + "-l" + l + "-k" + x));
                    double startedAt = nowMs();
                    try {
                      mutex.acquire();
                      mutex.release();
                    } catch (Exception e) {
                      errors.incrementAndGet();
                      continue;
                    }
                    double endedAt = nowMs();
                    if (endedAt >= measureFrom && endedAt <= measureTo) pairs.incrementAndGet();
                    if (startedAt >= measureFrom && endedAt <= measureTo) {
                      own.add(endedAt - startedAt);
                    }
                  }
                  synchronized (latencies) {
                    latencies.addAll(own);
                  }
                });
        threads.add(thread);
        thread.start();
      }
      double cpuMs = processCpuMs(measureFrom, measureTo);
      for (Thread thread : threads) thread.join();
      Map<String, Object> result = new LinkedHashMap<>();
      result.put("concurrency", concurrency);
      result.put("windowMs", durationMs);
      result.put("pairs", pairs.get());
      result.put("cpuMs", cpuMs);
      result.put("latenciesMs", latencies);
      result.put("errors", errors.get());
      results.add(result);
    }
    Map<String, Object> reply = new LinkedHashMap<>();
    reply.put("type", "uncontended");
    reply.put("levels", results);
    return reply;
  }

  /**
   * This JVM's CPU time (all threads, ms) from fromMs to toMs (nowMs clock), scaled to exactly
   * that window when the sleeps wake late; the same figure as the Node worker's sampleCpu.
   */
  private static double processCpuMs(double fromMs, double toMs) {
    com.sun.management.OperatingSystemMXBean os =
        (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
    parkUntil(fromMs);
    double startedAt = nowMs();
    long before = os.getProcessCpuTime();
    parkUntil(toMs);
    double spentMs = (os.getProcessCpuTime() - before) / 1e6;
    return spentMs * ((toMs - fromMs) / (nowMs() - startedAt));
  }

  private static Map<String, Object> contended(Map<String, Object> job) throws Exception {
    double startAt = ((Number) job.get("startAt")).doubleValue();
    double endAt = ((Number) job.get("endAt")).doubleValue();
    double drainMs = ((Number) job.get("drainMs")).doubleValue();
    long holdNanos = (long) (((Number) job.get("holdMs")).doubleValue() * 1e6);
    String path = base + "/" + job.get("key");
    int clientBase = ((Number) job.get("clientBase")).intValue();
    List<double[]> records = new ArrayList<>();
    Map<Integer, Double> pending = new ConcurrentHashMap<>();
    AtomicInteger errors = new AtomicInteger();
    List<Thread> threads = new ArrayList<>();
    for (int index = 0; index < clients.size(); index++) {
      final int client = clientBase + index;
      final InterProcessMutex mutex = new InterProcessMutex(clients.get(index), path);
      Thread thread =
          new Thread(
              () -> {
                parkUntil(startAt);
                while (nowMs() < endAt) {
                  double requestedAt = nowMs();
                  pending.put(client, requestedAt);
                  try {
                    mutex.acquire();
                  } catch (Exception e) {
                    pending.remove(client);
                    errors.incrementAndGet();
                    if (Thread.currentThread().isInterrupted()) return;
                    continue;
                  }
                  pending.remove(client);
                  double grantedAt = nowMs();
                  LockSupport.parkNanos(holdNanos);
                  double releaseAt = nowMs();
                  try {
                    mutex.release();
                  } catch (Exception e) {
                    errors.incrementAndGet();
                  }
                  double doneAt = nowMs();
                  synchronized (records) {
                    records.add(new double[] {client, requestedAt, grantedAt, releaseAt, doneAt});
                  }
                }
              });
      thread.setDaemon(true);
      threads.add(thread);
      thread.start();
    }
    for (Thread thread : threads) {
      long leftMs = (long) (endAt + drainMs - nowMs());
      if (leftMs > 0) thread.join(leftMs);
    }
    Map<String, Object> reply = new LinkedHashMap<>();
    reply.put("type", "contended");
    synchronized (records) {
      reply.put("records", new ArrayList<>(records));
    }
    List<double[]> stillPending = new ArrayList<>();
    pending.forEach((client, requestedAt) -> stillPending.add(new double[] {client, requestedAt}));
    reply.put("pending", stillPending);
    reply.put("reportedAt", nowMs());
    reply.put("errors", errors.get());
    return reply;
  }

  private static void parkUntil(double atMs) {
    for (double left = atMs - nowMs(); left > 0; left = atMs - nowMs()) {
      LockSupport.parkNanos((long) (left * 1e6));
    }
  }
}
