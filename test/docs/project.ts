/**
 * The scratch project the doc-tests check the docs' code blocks in: a folder where `fencelock`,
 * `fencelock/<subpath>` and `@fencelock/cli/<subpath>` are the private build's packages (with
 * their declarations, as users get them) and every other package (engine clients, `@types/node`)
 * is the repository's. Each block is one file; two TypeScript programs check them all at once
 * (one for complete programs, one for excerpts, which see the names of `excerpt-globals.d.ts`),
 * sharing the parsed library and declaration files. Diagnostics are mapped back to the Markdown
 * file and line. The folder keeps `tsconfig.json` and `tsconfig.excerpts.json`, so
 * `npx tsc -p <folder>` shows the same errors.
 */
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import ts from 'typescript';
import type { PrivateBuild } from '../helpers/private-build.js';
import { ROOT } from '../helpers/private-build.js';
import { type DocBlock, shellScript, testedCode } from './blocks.js';

/** Where the doc-tests keep their scratch projects (beside the private builds). */
const CACHE = join(ROOT, 'node_modules', '.cache');

/**
 * The compiler options of the blocks: a strict ES-module project on Node 20 (`nodenext`), with the
 * stricter checks `tsc --init` of TypeScript 5.9 turns on. Excerpts are modules too
 * (`moduleDetection: force`), so top-level await is allowed in them.
 */
const COMPILER_OPTIONS = {
  target: 'es2022',
  lib: ['es2023', 'esnext.disposable'],
  module: 'nodenext',
  moduleResolution: 'nodenext',
  moduleDetection: 'force',
  types: ['node'],
  strict: true,
  noUncheckedIndexedAccess: true,
  exactOptionalPropertyTypes: true,
  verbatimModuleSyntax: true,
  isolatedModules: true,
  skipLibCheck: true,
  allowJs: true,
  rootDir: 'blocks',
  outDir: 'out',
};

/** A block written into the scratch project. */
export interface PlacedBlock {
  readonly block: DocBlock;
  /** The file holding its code (`blocks/03-README-53.ts`), absolute. */
  readonly source: string;
  /** What runs: the emitted `.js` of a ts program, the source of a js program, a `.sh` script. */
  readonly entry: string;
  /** The folder it runs in (its `sqlite:./…` files land there), absolute. */
  readonly cwd: string;
}

/** The scratch project: its folder and its blocks. */
export interface ScratchProject {
  readonly dir: string;
  /** Holds the `fencelock` (and `npx`) commands the shell blocks run. */
  readonly binDir: string;
  readonly blocks: readonly PlacedBlock[];
  remove(): void;
}

/** The extension a block's file gets. */
function extensionOf(block: DocBlock): string {
  if (block.kind === 'sh') return '.sh';
  if (block.kind === 'ts') return '.ts';
  return block.cjs ? '.cjs' : '.mjs';
}

/** `03-README-53`: an index, then the file and line, for people reading the folder. */
function baseName(block: DocBlock, index: number): string {
  const file = block.file.replace(/\.md$/, '').replace(/[^A-Za-z0-9]+/g, '-');
  return `${String(index).padStart(2, '0')}-${file}-${block.line}`;
}

/**
 * Make a scratch project for `blocks` on `build`: each block's code (`redisUrl` in place of a
 * `redis` block's URL) in `blocks/`, a run folder per block in `run/`, the commands in `bin/`.
 */
export function createScratchProject(
  build: PrivateBuild,
  blocks: readonly DocBlock[],
  redisUrl: string,
): ScratchProject {
  mkdirSync(CACHE, { recursive: true });
  const dir = mkdtempSync(join(CACHE, 'fencelock-doc-tests-'));
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ private: true, type: 'module' }));
  linkPackage(dir, 'fencelock', join(build.root, 'packages', 'fencelock'));
  linkPackage(dir, '@fencelock/cli', join(build.root, 'packages', 'cli'));
  const binDir = join(dir, 'bin');
  writeCommands(binDir, build.cli);
  copyFileSync(
    join(ROOT, 'test', 'docs', 'excerpt-globals.d.ts'),
    join(dir, 'excerpt-globals.d.ts'),
  );
  mkdirSync(join(dir, 'blocks'));
  const placed = blocks.map((block, index) => {
    const name = baseName(block, index);
    const source = join(dir, 'blocks', `${name}${extensionOf(block)}`);
    const code = testedCode(block, redisUrl);
    writeFileSync(source, block.kind === 'sh' ? shellScript(code) : code);
    const entry = block.kind === 'ts' ? join(dir, 'out', `${name}.js`) : source;
    const cwd = join(dir, 'run', name);
    mkdirSync(cwd, { recursive: true });
    return { block, source, entry, cwd };
  });
  const tsFiles = (mode: (block: DocBlock) => boolean) =>
    placed
      .filter((p) => p.block.kind !== 'sh' && mode(p.block))
      .map((p) => relative(dir, p.source));
  writeFileSync(
    join(dir, 'tsconfig.json'),
    JSON.stringify(
      {
        compilerOptions: COMPILER_OPTIONS,
        files: tsFiles((b) => b.mode !== 'excerpt'),
      },
      null,
      2,
    ),
  );
  writeFileSync(
    join(dir, 'tsconfig.excerpts.json'),
    JSON.stringify(
      {
        extends: './tsconfig.json',
        compilerOptions: { noEmit: true },
        files: ['excerpt-globals.d.ts', ...tsFiles((b) => b.mode === 'excerpt')],
      },
      null,
      2,
    ),
  );
  return {
    dir,
    binDir,
    blocks: placed,
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** `node_modules/<name>` of `dir`, a link to `target`. */
function linkPackage(dir: string, name: string, target: string): void {
  const link = join(dir, 'node_modules', name);
  mkdirSync(dirname(link), { recursive: true });
  symlinkSync(target, link);
}

/**
 * `bin/fencelock` runs the built command line; `bin/npx` runs it for `npx fencelock …` and
 * `npx @fencelock/cli …` and refuses anything else (a doc-test installs nothing).
 */
function writeCommands(binDir: string, cli: string): void {
  mkdirSync(binDir);
  writeFileSync(
    join(binDir, 'fencelock'),
    `#!/bin/sh\nexec '${process.execPath}' '${cli}' "$@"\n`,
    { mode: 0o755 },
  );
  writeFileSync(
    join(binDir, 'npx'),
    [
      '#!/bin/sh',
      'case "$1" in',
      `  fencelock|@fencelock/cli) shift; exec '${process.execPath}' '${cli}' "$@" ;;`,
      'esac',
      'echo "doc-tests: npx runs only fencelock here, not $1" >&2',
      'exit 127',
      '',
    ].join('\n'),
    { mode: 0o755 },
  );
}

/** What the type check found: messages per block, and those outside any block. */
export interface CheckResult {
  readonly byBlock: ReadonlyMap<DocBlock, readonly string[]>;
  readonly outside: readonly string[];
}

/**
 * Type-check every ts/js block of `project` (js blocks: syntax only) and emit the ts programs'
 * JavaScript into `out/`. Messages name the Markdown file and line:
 * `README.md:58:5 - error TS2304: Cannot find name 'chargeCard'.`
 */
export function checkBlocks(project: ScratchProject): CheckResult {
  const host = sharedHost();
  const programs = ts.createProgram(programOptions(project.dir, 'tsconfig.json', host));
  const excerpts = ts.createProgram(programOptions(project.dir, 'tsconfig.excerpts.json', host));
  const diagnostics = [
    ...ts.getPreEmitDiagnostics(programs),
    ...ts.getPreEmitDiagnostics(excerpts),
  ];
  for (const placed of project.blocks) {
    if (placed.block.kind !== 'ts' || placed.block.mode !== 'program') continue;
    const result = programs.emit(programs.getSourceFile(placed.source));
    diagnostics.push(...result.diagnostics);
  }
  const bySource = new Map(project.blocks.map((p) => [p.source, p.block]));
  const byBlock = new Map<DocBlock, string[]>(project.blocks.map((p) => [p.block, []]));
  const outside: string[] = [];
  for (const diagnostic of diagnostics) {
    const block = diagnostic.file ? bySource.get(diagnostic.file.fileName) : undefined;
    if (block === undefined) outside.push(formatOutside(diagnostic));
    else byBlock.get(block)?.push(formatInBlock(diagnostic, block));
  }
  return { byBlock, outside };
}

/** A compiler host whose parsed files are reused by the next program (lib and .d.ts files). */
function sharedHost(): ts.CompilerHost {
  const host = ts.createCompilerHost({});
  const cache = new Map<string, ts.SourceFile | undefined>();
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (fileName, languageVersion, onError, shouldCreate) => {
    const key = `${fileName}\0${typeof languageVersion === 'object' ? languageVersion.impliedNodeFormat : ''}`;
    if (!cache.has(key))
      cache.set(key, getSourceFile(fileName, languageVersion, onError, shouldCreate));
    return cache.get(key);
  };
  return host;
}

/** The program a tsconfig of the scratch project describes. */
function programOptions(
  dir: string,
  config: string,
  host: ts.CompilerHost,
): ts.CreateProgramOptions {
  const read = ts.readConfigFile(join(dir, config), ts.sys.readFile);
  const parsed = ts.parseJsonConfigFileContent(read.config, ts.sys, dir);
  return { rootNames: parsed.fileNames, options: parsed.options, host };
}

/** `README.md:58:5 - error TS2304: …`: the diagnostic's line in the Markdown file. */
function formatInBlock(diagnostic: ts.Diagnostic, block: DocBlock): string {
  const { line, character } = diagnostic.file!.getLineAndCharacterOfPosition(diagnostic.start ?? 0);
  // The block's first line of code is the line after its opening fence.
  const where = `${block.file}:${block.line + 1 + line}:${character + 1}`;
  return `${where} - ${category(diagnostic)} TS${diagnostic.code}: ${message(diagnostic)}`;
}

function formatOutside(diagnostic: ts.Diagnostic): string {
  const file = diagnostic.file;
  if (file === undefined)
    return `${category(diagnostic)} TS${diagnostic.code}: ${message(diagnostic)}`;
  const { line, character } = file.getLineAndCharacterOfPosition(diagnostic.start ?? 0);
  const where = `${file.fileName}:${line + 1}:${character + 1}`;
  return `${where} - ${category(diagnostic)} TS${diagnostic.code}: ${message(diagnostic)}`;
}

function category(diagnostic: ts.Diagnostic): string {
  return ts.DiagnosticCategory[diagnostic.category].toLowerCase();
}

function message(diagnostic: ts.Diagnostic): string {
  return ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
}
