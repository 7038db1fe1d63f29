/**
 * The code blocks of the documentation, found with a Markdown parser and sorted by what the
 * doc-tests do with them (docs/doc-tests.md states the convention this module implements).
 * Pure: reads text, runs nothing. `test/integration/docs/code-blocks.test.ts` checks and runs the
 * blocks; `test/integration/packaging/packed.test.ts` runs the README's `quickstart` block in a
 * fresh project.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { Code, Nodes } from 'mdast';
import { fromMarkdown } from 'mdast-util-from-markdown';

/** What a block is written in, as the doc-tests group the fence's language words. */
export type BlockKind = 'ts' | 'js' | 'sh';

/**
 * What the doc-tests do with a block:
 * - `program`: type-check, then run (ts / js blocks without `compile` or `excerpt`);
 * - `compile`: type-check only;
 * - `excerpt`: type-check as a fragment, with the names of the excerpt prelude;
 * - `run`: run with bash (sh blocks marked `run`);
 * - `shown`: nothing (sh blocks that invoke no `fencelock` command).
 */
export type BlockMode = 'program' | 'compile' | 'excerpt' | 'run' | 'shown';

/** A fenced code block in scope, as found in a Markdown file, before it is classified. */
export interface RawBlock {
  /** The Markdown file, relative to the repository's root (`docs/server.md`). */
  readonly file: string;
  /** Line of the opening fence in that file, 1-based. */
  readonly line: number;
  readonly kind: BlockKind;
  /** The language word as written (`typescript`, `console`, …). */
  readonly lang: string;
  /** The words after the language on the fence line. */
  readonly meta: readonly string[];
  /** The block's text, without the fences. */
  readonly code: string;
}

/** One fenced code block in scope, with what the doc-tests do with it. */
export interface DocBlock extends RawBlock {
  readonly mode: BlockMode;
  /** Runs against a real Redis: the doc-test puts its own Redis URL in place of the block's. */
  readonly redis: boolean;
  /** A CommonJS program (`require('fencelock')`), run as a `.cjs` file. */
  readonly cjs: boolean;
  /** The README's Quickstart: also run as a newcomer would, in a fresh project. */
  readonly quickstart: boolean;
  /** Ways the block breaks the convention; a block with any fails its doc-test. */
  readonly problems: readonly string[];
}

const KINDS: Readonly<Record<string, BlockKind>> = {
  ts: 'ts',
  typescript: 'ts',
  js: 'js',
  javascript: 'js',
  mjs: 'js',
  cjs: 'js',
  sh: 'sh',
  bash: 'sh',
  shell: 'sh',
  console: 'sh',
};

const META_WORDS = new Set(['redis', 'compile', 'excerpt', 'cjs', 'run', 'quickstart']);

/** The visible first line an excerpt carries, per kind. */
const EXCERPT_MARK: Readonly<Record<BlockKind, string>> = {
  ts: '// Excerpt',
  js: '// Excerpt',
  sh: '# Excerpt',
};

/** A shell line that runs the `fencelock` command (after an optional `$ ` prompt). */
const INVOKES_FENCELOCK =
  /^\s*(?:\$\s+)?(?:fencelock|npx\s+fencelock|npx\s+@fencelock\/cli)(?:\s|$)/m;

/** The Redis URL a `redis` block writes; the doc-test replaces it with its own. */
const DOC_REDIS_URL = /redis:\/\/(?:127\.0\.0\.1|localhost):6379(?![0-9])/g;

/** Folders never searched for Markdown: installed packages, build output, dot-folders. */
const SKIPPED_FOLDERS = new Set(['node_modules', 'dist']);
/**
 * Folders under docs/ that the site generates (the API reference), not written by hand. Add the
 * site's generated folders here.
 */
const GENERATED_DOCS_FOLDERS = new Set(['docs/api']);

/**
 * The Markdown files whose blocks are tested, relative to `root`, sorted: README.md,
 * CONTRIBUTING.md, packages/<name>/README.md and every `.md` under docs/ (but not in dot-folders,
 * `node_modules`, `dist` or the generated API reference), less the files git ignores.
 */
export function docFiles(root: string): string[] {
  const files = ['README.md', 'CONTRIBUTING.md'].filter((name) => isFile(join(root, name)));
  for (const entry of safeReaddir(join(root, 'packages'))) {
    const readme = join('packages', entry, 'README.md');
    if (isFile(join(root, readme))) files.push(readme);
  }
  files.push(...markdownUnder(root, 'docs'));
  const ignored = gitIgnored(root, files);
  return files.filter((file) => !ignored.has(file)).sort();
}

/**
 * Which of `files` git ignores (copies made by a build, such as the README that `npm pack` puts
 * in packages/fencelock); none when `root` is not a git work tree.
 */
function gitIgnored(root: string, files: readonly string[]): Set<string> {
  const answer = spawnSync('git', ['-C', root, 'check-ignore', '--stdin'], {
    input: files.join('\n'),
    encoding: 'utf8',
  });
  // Exit 0: some are ignored (listed); 1: none is; 128: not a repository.
  if (answer.status !== 0) return new Set();
  return new Set(answer.stdout.split('\n').filter((line) => line !== ''));
}

/** The `.md` files under `folder` (relative to `root`), skipping the folders above. */
function markdownUnder(root: string, folder: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(join(root, folder), { withFileTypes: true })) {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) {
      if (entry.name.startsWith('.') || SKIPPED_FOLDERS.has(entry.name)) continue;
      if (GENERATED_DOCS_FOLDERS.has(path)) continue;
      found.push(...markdownUnder(root, path));
    } else if (entry.isFile() && entry.name.endsWith('.md')) {
      found.push(path);
    }
  }
  return found;
}

function safeReaddir(path: string): string[] {
  try {
    return readdirSync(path);
  } catch {
    return [];
  }
}

function isFile(path: string): boolean {
  return statSync(path, { throwIfNoEntry: false })?.isFile() === true;
}

/** Every block in scope of the files `docFiles(root)` lists. */
export function docBlocks(root: string): DocBlock[] {
  return docFiles(root).flatMap((file) => blocksOf(file, readFileSync(join(root, file), 'utf8')));
}

/** The blocks in scope of one Markdown text (`file` names it in the results). */
export function blocksOf(file: string, markdown: string): DocBlock[] {
  const blocks: DocBlock[] = [];
  for (const node of fencedCode(fromMarkdown(markdown))) {
    const lang = node.lang ?? '';
    const kind = KINDS[lang];
    if (kind === undefined) continue;
    blocks.push(
      classify({
        file,
        line: node.position?.start.line ?? 0,
        kind,
        lang,
        meta: (node.meta ?? '').split(/\s+/).filter((word) => word !== ''),
        code: node.value,
      }),
    );
  }
  return blocks;
}

/** The README's Quickstart: its block, and the output the README shows right after it. */
export interface Quickstart {
  readonly block: DocBlock;
  /** The lines of the `text` block that follows the Quickstart block. */
  readonly output: readonly string[];
}

/**
 * The one block marked `quickstart` in `markdown`, with the output shown by the fenced `text`
 * block that comes next in the document.
 * @throws Error when there is not exactly one such block, or no `text` block follows it.
 */
export function quickstartOf(file: string, markdown: string): Quickstart {
  const nodes = fencedCode(fromMarkdown(markdown));
  const marked = blocksOf(file, markdown).filter((block) => block.quickstart);
  if (marked.length !== 1) {
    throw new Error(`${file}: ${marked.length} blocks marked quickstart (one is expected)`);
  }
  const block = marked[0]!;
  const next = nodes[nodes.findIndex((node) => node.position?.start.line === block.line) + 1];
  if (next?.lang !== 'text') {
    throw new Error(`${file}:${block.line}: the quickstart block is not followed by a text block`);
  }
  return { block, output: next.value.split('\n') };
}

/** The code nodes of a Markdown tree, in document order. */
function fencedCode(node: Nodes): Code[] {
  if (node.type === 'code') return [node];
  if (!('children' in node)) return [];
  return node.children.flatMap((child) => fencedCode(child));
}

/** Decide a block's mode and list the ways it breaks the convention. */
export function classify(raw: RawBlock): DocBlock {
  const words = new Set(raw.meta);
  const problems: string[] = [];
  for (const word of words) {
    if (!META_WORDS.has(word)) problems.push(`unknown meta word "${word}"`);
  }
  const cjs = raw.lang === 'cjs' || words.has('cjs');
  const mode =
    raw.kind === 'sh' ? shellMode(raw, words, problems) : moduleMode(raw, words, cjs, problems);
  checkExcerptMark(raw, mode, problems);
  return {
    ...raw,
    mode,
    redis: words.has('redis'),
    cjs,
    quickstart: words.has('quickstart'),
    problems,
  };
}

/** The mode of a ts / js block. */
function moduleMode(
  raw: RawBlock,
  words: Set<string>,
  cjs: boolean,
  problems: string[],
): BlockMode {
  if (words.has('run')) {
    problems.push('"run" is for shell blocks (a ts/js block without meta runs)');
  }
  if (words.has('compile') && words.has('excerpt')) {
    problems.push('"compile" and "excerpt" exclude each other');
  }
  const mode: BlockMode = words.has('excerpt')
    ? 'excerpt'
    : words.has('compile')
      ? 'compile'
      : 'program';
  if (cjs && raw.kind === 'ts') problems.push('"cjs" is for js blocks');
  if (cjs && mode === 'excerpt') problems.push('an excerpt is an ES module fragment, not "cjs"');
  if (words.has('redis') && mode !== 'program') {
    problems.push(`"redis" marks a block that runs, not one that is "${mode}"`);
  }
  if (words.has('quickstart') && (mode !== 'program' || words.has('redis') || cjs)) {
    problems.push('"quickstart" marks a complete ES module program on the embedded store');
  }
  return mode;
}

/** The mode of a shell block. */
function shellMode(raw: RawBlock, words: Set<string>, problems: string[]): BlockMode {
  for (const word of ['compile', 'cjs', 'quickstart']) {
    if (words.has(word)) problems.push(`"${word}" is for ts/js blocks`);
  }
  if (words.has('run') && words.has('excerpt'))
    problems.push('"run" and "excerpt" exclude each other');
  if (words.has('redis') && !words.has('run'))
    problems.push('"redis" needs "run" on a shell block');
  if (words.has('excerpt')) return 'excerpt';
  if (words.has('run')) return 'run';
  if (INVOKES_FENCELOCK.test(raw.code)) {
    problems.push('invokes the fencelock command: mark it "run" (run it) or "excerpt" (not run)');
  }
  return 'shown';
}

/** An excerpt shows it with its first line; a block that is not one must not say so. */
function checkExcerptMark(raw: RawBlock, mode: BlockMode, problems: string[]): void {
  const mark = EXCERPT_MARK[raw.kind];
  const marked = (raw.code.split('\n')[0] ?? '').trimStart().startsWith(mark);
  if (mode === 'excerpt' && !marked) {
    problems.push(`an excerpt's first line must be a comment starting "${mark}"`);
  }
  if (mode !== 'excerpt' && marked) {
    problems.push(`the first line says "${mark}" but the fence lacks the "excerpt" meta word`);
  }
}

/** The block's code as the doc-test checks and runs it: a `redis` block gets `redisUrl`. */
export function testedCode(block: DocBlock, redisUrl: string): string {
  return block.redis ? block.code.replace(DOC_REDIS_URL, redisUrl) : block.code;
}

/**
 * The script a `run` shell block becomes: its lines with a leading `$ ` prompt removed (lines
 * starting `# ` are comments to bash already, which is how the docs show output).
 */
export function shellScript(code: string): string {
  return `${code
    .split('\n')
    .map((line) => line.replace(/^\$ /, ''))
    .join('\n')}\n`;
}

/** A block's place and mode, for messages: `docs/server.md:17 (sh run)`. */
export function describeBlock(block: DocBlock): string {
  const flags = [block.redis ? 'redis' : '', block.cjs ? 'cjs' : ''].filter((f) => f !== '');
  return `${block.file}:${block.line} (${[block.kind, block.mode, ...flags].join(' ')})`;
}
