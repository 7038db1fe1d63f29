/**
 * The docs' code blocks (README.md, CONTRIBUTING.md, packages/<name>/README.md, docs/**): each
 * ts/js block type-checks against the built packages, and each runnable one (a ts/js program, a
 * shell block marked `run`) exits 0 within 20 s; blocks marked `redis` run on the tests' Redis.
 * docs/doc-tests.md states the convention; test/docs/ holds the tool.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type DocBlock, describeBlock, docBlocks } from '../../docs/blocks.js';
import {
  type CheckResult,
  checkBlocks,
  createScratchProject,
  type ScratchProject,
} from '../../docs/project.js';
import { BLOCK_TIMEOUT_MS, type BlockRun, runBlocks } from '../../docs/run.js';
import { REDIS_URL } from '../../helpers/engines.js';
import { privateBuild, ROOT } from '../../helpers/private-build.js';

const blocks = docBlocks(ROOT);
let project: ScratchProject | undefined;
let checked: CheckResult;
const runsOf = new Map<DocBlock, BlockRun>();

beforeAll(async () => {
  const build = await privateBuild('doc-tests');
  project = createScratchProject(build, blocks, REDIS_URL);
  checked = checkBlocks(project);
  for (const [placed, run] of await runBlocks(project)) runsOf.set(placed.block, run);
}, 300_000);

afterAll(() => project?.remove());

/** What went wrong with a run, or nothing. */
function runReport(run: BlockRun | undefined): string[] {
  if (run === undefined || run.code === 0) return [];
  const ending =
    run.code === null
      ? `killed (${run.signal}) after ${run.elapsedMs} ms (the limit is ${BLOCK_TIMEOUT_MS} ms)`
      : `exited with code ${run.code}`;
  return [`run: ${ending}`, `--- stderr\n${run.stderr}`, `--- stdout\n${run.stdout}`];
}

describe('the docs code blocks', () => {
  it('include the README TypeScript blocks', () => {
    expect(blocks.filter((b) => b.file === 'README.md' && b.kind === 'ts').length).toBeGreaterThan(
      0,
    );
  });

  it('type-check with no error outside the blocks (prelude, packages)', () => {
    expect(checked.outside).toEqual([]);
  });

  it.each(blocks.map((block) => [describeBlock(block), block] as const))('%s', (_, block) => {
    const report = [
      ...block.problems.map((problem) => `convention: ${problem}`),
      ...(checked.byBlock.get(block) ?? []),
      ...runReport(runsOf.get(block)),
    ];
    expect(report.join('\n')).toBe('');
    if (block.mode === 'program' || block.mode === 'run') {
      expect(runsOf.get(block)?.code).toBe(0);
    }
  });
});
