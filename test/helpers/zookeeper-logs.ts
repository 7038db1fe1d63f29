/**
 * What the ZooKeeper servers of `scripts/services.sh` wrote while a test ran: their logs'
 * warnings and errors, and their JVMs' pauses longer than 50 ms (`zk<n>-pauses.log`). Printed
 * when a test fails with a request nobody answered, so that a CI log says whether a server
 * stalled or the client lost the request.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SERVICES_DIR } from './etcd-cluster.js';

/** Pauses shorter than this are left out, ms. */
const NOTABLE_PAUSE_MS = 50;
/** At most this many lines per file. */
const MAX_LINES = 40;

/** ISO 8601 UTC to the millisecond without the zone, as both logs begin their lines. */
function isoStamp(epochMs: number): string {
  return new Date(epochMs).toISOString().slice(0, 23);
}

function linesOf(file: string): string[] {
  try {
    return readFileSync(file, 'utf8').split('\n');
  } catch {
    return [];
  }
}

/** A pause line's length, ms: `Pause Young (…) 8M->4M(30M) 32.580ms` or `Total: 32874003 ns`. */
function pauseMs(line: string): number {
  const gc = /Pause .* ([\d.]+)ms$/.exec(line);
  if (gc) return Number(gc[1]);
  const safepoint = /Total: (\d+) ns/.exec(line);
  return safepoint ? Number(safepoint[1]) / 1e6 : 0;
}

/**
 * The servers' notable lines from `sinceMs` (epoch ms) on, one block per file; empty when there
 * were none. The server log's lines start `2026-12-02T06:33:30.614 [thread] LEVEL …`; the pause
 * log's `[2026-12-02T07:49:43.868+0000][1.208s] …` (both UTC on the machines here).
 */
export function ensembleNotesSince(
  sinceMs: number,
  servers: readonly number[] = [1, 2, 3],
): string {
  const since = isoStamp(sinceMs);
  const blocks: string[] = [];
  for (const n of servers) {
    const dir = join(SERVICES_DIR, 'zookeeper');
    const logLines = linesOf(join(dir, `zk${n}.log`)).filter(
      (line) => line.slice(0, 23) >= since && / (WARN|ERROR) /.test(line),
    );
    const pauseLines = linesOf(join(dir, `zk${n}-pauses.log`)).filter(
      (line) => line.slice(1, 24) >= since && pauseMs(line) >= NOTABLE_PAUSE_MS,
    );
    for (const [name, lines] of [
      [`zk${n}.log`, logLines],
      [`zk${n}-pauses.log`, pauseLines],
    ] as const) {
      if (lines.length > 0) blocks.push(`--- ${name}\n${lines.slice(-MAX_LINES).join('\n')}`);
    }
  }
  return blocks.join('\n');
}
