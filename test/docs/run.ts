/**
 * Run the runnable blocks of a doc-test scratch project as child processes, a few at a time:
 * programs with Node (the emitted `.js` of a ts block, a js block's own `.mjs` / `.cjs`), `run`
 * shell blocks with `bash -euo pipefail` and the built `fencelock` first on PATH.
 */
import { execFile } from 'node:child_process';
import { delimiter } from 'node:path';
import type { PlacedBlock, ScratchProject } from './project.js';

/** How long one block may run, ms. */
export const BLOCK_TIMEOUT_MS = 20_000;
/** How many blocks run at once. */
const PARALLEL_RUNS = 2;

/** How a block's run ended. */
export interface BlockRun {
  /** The exit code; null when it was killed (`signal`). */
  readonly code: number | null;
  readonly signal: string | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly elapsedMs: number;
}

/** Whether a block runs (programs and `run` shell blocks). */
export function runs(placed: PlacedBlock): boolean {
  return placed.block.mode === 'program' || placed.block.mode === 'run';
}

/** Run every runnable block of `project`; the runs by block. */
export async function runBlocks(
  project: ScratchProject,
): Promise<ReadonlyMap<PlacedBlock, BlockRun>> {
  const queue = project.blocks.filter(runs);
  const results = new Map<PlacedBlock, BlockRun>();
  const worker = async () => {
    for (let next = queue.shift(); next !== undefined; next = queue.shift()) {
      results.set(next, await runBlock(project, next));
    }
  };
  await Promise.all(Array.from({ length: PARALLEL_RUNS }, worker));
  return results;
}

/** Run one block in its own folder. */
function runBlock(project: ScratchProject, placed: PlacedBlock): Promise<BlockRun> {
  const started = performance.now();
  const [command, args] =
    placed.block.kind === 'sh'
      ? ['bash', ['-euo', 'pipefail', placed.source]]
      : [process.execPath, [placed.entry]];
  return new Promise((resolve) => {
    execFile(
      command,
      args,
      {
        cwd: placed.cwd,
        timeout: BLOCK_TIMEOUT_MS,
        killSignal: 'SIGKILL',
        maxBuffer: 1 << 22,
        env: { ...process.env, PATH: `${project.binDir}${delimiter}${process.env.PATH ?? ''}` },
      },
      (error, stdout, stderr) => {
        const failure = error as (Error & { code?: number | string; signal?: string }) | null;
        resolve({
          code: failure === null ? 0 : typeof failure.code === 'number' ? failure.code : null,
          signal: failure?.signal ?? null,
          stdout,
          stderr,
          elapsedMs: Math.round(performance.now() - started),
        });
      },
    );
  });
}
