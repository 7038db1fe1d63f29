/**
 * The doc-tests' reading of Markdown (test/docs/blocks.ts): which fenced blocks are in scope,
 * their mode, the convention's checks, the Redis URL rewrite and the shell script a `run` block
 * becomes. docs/doc-tests.md states the convention.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  blocksOf,
  type DocBlock,
  describeBlock,
  docFiles,
  quickstartOf,
  shellScript,
  testedCode,
} from '../docs/blocks.js';

const fence = '```';

/** The one block of a Markdown text made of `fenceLine`, `body` and a closing fence. */
function only(fenceLine: string, body: string): DocBlock {
  const blocks = blocksOf('doc.md', `Text.\n\n${fenceLine}\n${body}\n${fence}\n`);
  expect(blocks).toHaveLength(1);
  return blocks[0]!;
}

describe('blocksOf', () => {
  it('keeps ts, js and shell blocks and leaves the other languages out', () => {
    const markdown = [
      '# Title',
      '',
      `${fence}ts`,
      'const a = 1;',
      `${fence}`,
      '',
      `${fence}json`,
      '{"a": 1}',
      `${fence}`,
      '',
      `${fence}`,
      'plain text',
      `${fence}`,
      '',
      '- a list item',
      '',
      `  ${fence}console`,
      '  $ fencelock --help',
      `  ${fence}`,
      '',
      `~~~javascript`,
      'console.log(1);',
      '~~~',
      '',
      `${fence}python`,
      'print(1)',
      `${fence}`,
      '',
    ].join('\n');
    const blocks = blocksOf('docs/a.md', markdown);
    expect(blocks.map((b) => [b.file, b.line, b.kind, b.lang, b.code])).toEqual([
      ['docs/a.md', 3, 'ts', 'ts', 'const a = 1;'],
      ['docs/a.md', 17, 'sh', 'console', '$ fencelock --help'],
      ['docs/a.md', 21, 'js', 'javascript', 'console.log(1);'],
    ]);
  });

  it('does not take a fence shown inside a longer fence for a block', () => {
    const markdown = ['````md', `${fence}ts`, 'not code', `${fence}`, '````', ''].join('\n');
    expect(blocksOf('doc.md', markdown)).toEqual([]);
  });

  it('makes a ts block without meta a program, with no problem', () => {
    const block = only(`${fence}ts`, "import { createLocker } from 'fencelock';");
    expect([block.mode, block.redis, block.cjs, block.quickstart, block.problems]).toEqual([
      'program',
      false,
      false,
      false,
      [],
    ]);
  });

  it('reads the meta words after the language', () => {
    expect(only(`${fence}ts redis`, 'x').mode).toBe('program');
    expect(only(`${fence}ts redis`, 'x').redis).toBe(true);
    expect(only(`${fence}typescript compile`, 'x').mode).toBe('compile');
    expect(only(`${fence}ts quickstart`, 'x').quickstart).toBe(true);
    expect(only(`${fence}js cjs`, 'x').cjs).toBe(true);
    expect(only(`${fence}cjs`, 'x')).toMatchObject({ kind: 'js', cjs: true, mode: 'program' });
    expect(only(`${fence}mjs`, 'x')).toMatchObject({ kind: 'js', cjs: false });
    expect(only(`${fence}sh run redis`, 'fencelock --help')).toMatchObject({
      mode: 'run',
      redis: true,
      problems: [],
    });
  });

  it('wants the visible "// Excerpt" first line on an excerpt, and only there', () => {
    expect(only(`${fence}ts excerpt`, '// Excerpt: locker as above.\nawait x;').problems).toEqual(
      [],
    );
    expect(only(`${fence}ts excerpt`, 'await x;').problems).toEqual([
      'an excerpt\'s first line must be a comment starting "// Excerpt"',
    ]);
    expect(only(`${fence}ts`, '// Excerpt\nawait x;').problems).toEqual([
      'the first line says "// Excerpt" but the fence lacks the "excerpt" meta word',
    ]);
    expect(only(`${fence}sh excerpt`, '# Excerpt\nfencelock serve').problems).toEqual([]);
    expect(only(`${fence}sh excerpt`, '// Excerpt\nfencelock serve').problems).toEqual([
      'an excerpt\'s first line must be a comment starting "# Excerpt"',
    ]);
  });

  it('wants a shell block that runs fencelock to say run or excerpt', () => {
    const problem = 'invokes the fencelock command: mark it "run" (run it) or "excerpt" (not run)';
    expect(only(`${fence}sh`, 'fencelock run --store sqlite: k -- true').problems).toEqual([
      problem,
    ]);
    expect(only(`${fence}console`, '$ npx fencelock --help').problems).toEqual([problem]);
    expect(only(`${fence}bash`, 'npx @fencelock/cli --help').problems).toEqual([problem]);
    // Installing, cloning and the repository's scripts are shown, not run.
    expect(only(`${fence}sh`, 'npm i -g @fencelock/cli\nnpm run demo').problems).toEqual([]);
    expect(only(`${fence}sh`, 'echo fencelock is a lock').problems).toEqual([]);
    expect(only(`${fence}sh`, 'npm i fencelock').mode).toBe('shown');
  });

  it('names meta words out of place or unknown', () => {
    expect(only(`${fence}ts redis compile`, 'x').problems).toEqual([
      '"redis" marks a block that runs, not one that is "compile"',
    ]);
    expect(only(`${fence}ts compile excerpt`, '// Excerpt\nx').problems).toEqual([
      '"compile" and "excerpt" exclude each other',
    ]);
    expect(only(`${fence}ts cjs`, 'x').problems).toEqual(['"cjs" is for js blocks']);
    expect(only(`${fence}ts run`, 'x').problems).toEqual([
      '"run" is for shell blocks (a ts/js block without meta runs)',
    ]);
    expect(only(`${fence}sh redis`, 'echo').problems).toEqual([
      '"redis" needs "run" on a shell block',
    ]);
    expect(only(`${fence}sh compile`, 'echo').problems).toEqual(['"compile" is for ts/js blocks']);
    expect(only(`${fence}ts quickstart redis`, 'x').problems).toEqual([
      '"quickstart" marks a complete ES module program on the embedded store',
    ]);
    expect(only(`${fence}ts runnable`, 'x').problems).toEqual(['unknown meta word "runnable"']);
  });

  it('describes a block by place and mode', () => {
    expect(describeBlock(only(`${fence}ts redis`, 'x'))).toBe('doc.md:3 (ts program redis)');
    expect(describeBlock(only(`${fence}sh run`, 'x'))).toBe('doc.md:3 (sh run)');
  });
});

describe('quickstartOf', () => {
  const quickstart = [
    '## Quickstart',
    '',
    `${fence}ts quickstart`,
    "console.log('hello');",
    'console.log(1n);',
    `${fence}`,
    '',
    'It prints:',
    '',
    `${fence}text`,
    'hello',
    '1',
    `${fence}`,
    '',
  ].join('\n');

  it('finds the quickstart block and the output shown after it', () => {
    const { block, output } = quickstartOf('README.md', `${fence}ts\nx\n${fence}\n\n${quickstart}`);
    expect([block.line, block.code, block.mode]).toEqual([
      7,
      "console.log('hello');\nconsole.log(1n);",
      'program',
    ]);
    expect(output).toEqual(['hello', '1']);
  });

  it('refuses a README with no quickstart block, or two, or no output after it', () => {
    expect(() => quickstartOf('README.md', '# nothing\n')).toThrow(
      'README.md: 0 blocks marked quickstart (one is expected)',
    );
    expect(() => quickstartOf('README.md', `${quickstart}\n${quickstart}`)).toThrow(
      'README.md: 2 blocks marked quickstart (one is expected)',
    );
    expect(() =>
      quickstartOf('README.md', `${fence}ts quickstart\nx\n${fence}\n\n${fence}sh\nls\n${fence}\n`),
    ).toThrow('README.md:1: the quickstart block is not followed by a text block');
  });
});

describe('testedCode', () => {
  const code = [
    "createLocker('redis://127.0.0.1:6379');",
    "createLocker('redis://localhost:6379/2');",
    "createLocker('redis://127.0.0.1:63790');",
  ].join('\n');

  it("puts the test's Redis URL in place of a redis block's", () => {
    expect(testedCode(only(`${fence}ts redis`, code), 'redis://127.0.0.1:6590')).toBe(
      [
        "createLocker('redis://127.0.0.1:6590');",
        "createLocker('redis://127.0.0.1:6590/2');",
        "createLocker('redis://127.0.0.1:63790');",
      ].join('\n'),
    );
  });

  it('leaves the code of other blocks as written', () => {
    expect(testedCode(only(`${fence}ts compile`, code), 'redis://127.0.0.1:6590')).toBe(code);
  });
});

describe('shellScript', () => {
  it('drops a leading "$ " prompt and keeps "# " output lines as comments', () => {
    expect(shellScript('$ fencelock --version\n# 0.1.0\necho done')).toBe(
      'fencelock --version\n# 0.1.0\necho done\n',
    );
  });
});

describe('docFiles', () => {
  const root = mkdtempSync(join(tmpdir(), 'fencelock-doc-files-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('lists the READMEs, CONTRIBUTING.md and docs/**, not generated or installed folders', () => {
    for (const file of [
      'README.md',
      'CONTRIBUTING.md',
      'CHANGELOG.md',
      'packages/cli/README.md',
      'packages/cli/notes.md',
      'docs/semantics.md',
      'docs/guide/start.md',
      'docs/api/index.md',
      'docs/.vitepress/cache/page.md',
      'docs/node_modules/pkg/README.md',
      'docs/torture/2026-11-30.json',
    ]) {
      mkdirSync(dirname(join(root, file)), { recursive: true });
      writeFileSync(join(root, file), '# x\n');
    }
    expect(docFiles(root)).toEqual([
      'CONTRIBUTING.md',
      'README.md',
      'docs/guide/start.md',
      'docs/semantics.md',
      'packages/cli/README.md',
    ]);
  });

  it('leaves out the files git ignores (the README copy npm pack makes)', () => {
    execFileSync('git', ['init', '-q', root]);
    writeFileSync(join(root, '.gitignore'), 'packages/cli/README.md\n');
    expect(docFiles(root)).toEqual([
      'CONTRIBUTING.md',
      'README.md',
      'docs/guide/start.md',
      'docs/semantics.md',
    ]);
  });
});
