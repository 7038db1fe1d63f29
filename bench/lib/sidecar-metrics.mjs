// What the sidecar's own locker counted, read from its `GET /metrics` (Prometheus text format,
// packages/fencelock/src/metrics/prometheus.ts): the load tests compare it with the grants their
// callers saw, on every store (fencing tokens no longer count grants on any engine).

/**
 * Grants the sidecar's locker received from the engine: the sum of every
 * `fencelock_acquire_attempts_total{…outcome="granted"…}` series.
 * @param {string} httpUrl the sidecar's HTTP base URL, e.g. `http://127.0.0.1:3500`.
 * @returns {Promise<number>}
 */
export async function grantsCountedBySidecar(httpUrl) {
  const response = await fetch(`${httpUrl}/metrics`, { signal: AbortSignal.timeout(10_000) });
  if (!response.ok) throw new Error(`GET /metrics: HTTP ${response.status}`);
  let grants = 0;
  for (const line of (await response.text()).split('\n')) {
    if (
      line.startsWith('fencelock_acquire_attempts_total{') &&
      line.includes('outcome="granted"')
    ) {
      grants += Number(line.slice(line.lastIndexOf(' ') + 1));
    }
  }
  return grants;
}
