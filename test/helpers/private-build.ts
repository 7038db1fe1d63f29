/**
 * The workspace's packages compiled from their sources into a private folder, for tests that run
 * them in child processes. Not their `dist/`: a developer may rebuild those (`rm -rf dist`) while
 * tests run, and a stale `dist/` would test old code. The folder is under `node_modules/.cache/`,
 * so the compiled files resolve the engine clients and other dependencies from the root's
 * `node_modules`. It has the repository's layout: a root `package.json`, and for each workspace
 * (`packages/fencelock`, `packages/cli`, `tools/*`) its `package.json` next to its `dist/` (with
 * the files tsc does not emit, such as Lua scripts), plus `node_modules/fencelock` and
 * `node_modules/@fencelock/*` links to them, so the packages import each other by name as when
 * installed. The CLI finds the demos there as in a clone (`fencelock demo …`).
 *
 * It only transpiles (`tsc --noCheck`): `npm run lint` type-checks. It emits the declarations
 * too, so the doc-tests type-check the docs' code against the packages as users get them. One
 * build serves every test file of a run: the folder is named after a hash of the sources, package
 * files and tsconfigs, so the first file that needs it compiles and the others reuse it while the
 * sources are unchanged.
 */
import { execFile, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { copyAssets } from '../../scripts/copy-assets.mjs';

/** The repository's root folder. */
export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** A compiled copy of the workspace. */
export interface PrivateBuild {
  /** The build's folder: the root `package.json`, each workspace, `node_modules/` links. */
  readonly root: string;
  /** The library's compiled folder, holding `index.js`, `fencing/`, `backends/`, … */
  readonly dir: string;
  /** The `fencelock` binary's entry point (`packages/cli/dist/cli/main.js` of the copy). */
  readonly cli: string;
  /** Kept for callers; the shared build stays for the next test file (see the module comment). */
  remove(): void;
}

const CACHE = join(ROOT, 'node_modules', '.cache');
const PREFIX = 'fencelock-build-';
/** Builds of older sources are deleted once they are this old, ms. */
const STALE_AFTER_MS = 60 * 60 * 1000;

/** The root's workspaces (`packages/fencelock`, …), in build order. */
function workspaces(): string[] {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  return pkg.workspaces as string[];
}

/** Compile every workspace, or reuse the build of the same sources. */
export async function privateBuild(_tag: string): Promise<PrivateBuild> {
  mkdirSync(CACHE, { recursive: true });
  const name = `${PREFIX}${sourceHash()}`;
  const root = join(CACHE, name);
  const built = {
    root,
    dir: join(root, 'packages', 'fencelock', 'dist'),
    cli: join(root, 'packages', 'cli', 'dist', 'cli', 'main.js'),
    remove: () => undefined,
  };
  if (existsSync(join(root, '.complete'))) return built;

  const staging = join(CACHE, `${PREFIX}staging-${randomBytes(4).toString('hex')}`);
  try {
    cpSync(join(ROOT, 'package.json'), join(staging, 'package.json'));
    await Promise.all(workspaces().map((folder) => compileWorkspace(folder, staging)));
    writeFileSync(join(staging, '.complete'), new Date().toISOString());
  } catch (error) {
    rmSync(staging, { recursive: true, force: true });
    throw error;
  }
  try {
    renameSync(staging, root);
  } catch {
    // Another test file finished the same build first: use it.
    rmSync(staging, { recursive: true, force: true });
  }
  removeStaleBuilds(name);
  return built;
}

/** Transpile one workspace into `into/<folder>/dist` and link it under `into/node_modules`. */
async function compileWorkspace(folder: string, into: string): Promise<void> {
  const source = join(ROOT, folder);
  const target = join(into, folder);
  const pkg = JSON.parse(readFileSync(join(source, 'package.json'), 'utf8'));
  mkdirSync(target, { recursive: true });
  cpSync(join(source, 'package.json'), join(target, 'package.json'));
  const dist = join(target, 'dist');
  try {
    await promisify(execFile)(
      process.execPath,
      [
        join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'),
        '-p',
        join(source, 'tsconfig.build.json'),
        '--outDir',
        dist,
        '--noCheck',
      ],
      { cwd: source, timeout: 180_000 },
    );
  } catch (error) {
    // tsc still emits when it reports an error (an edit elsewhere with a syntax slip).
    if (!existsSync(dist)) throw error;
  }
  copyAssets(join(source, 'src'), dist);
  // Files a package ships beside its code (the CLI's .proto files).
  if (existsSync(join(source, 'proto')))
    cpSync(join(source, 'proto'), join(target, 'proto'), { recursive: true });
  const link = join(into, 'node_modules', pkg.name);
  mkdirSync(dirname(link), { recursive: true });
  symlinkSync(relative(dirname(link), target), link);
}

/** A hash of everything the build reads. */
function sourceHash(): string {
  // The build's own format: a change here makes a new folder (v2: with declarations).
  const hash = createHash('sha256').update('v2');
  const files = [join(ROOT, 'package.json'), join(ROOT, 'tsconfig.base.json')];
  for (const folder of workspaces()) {
    files.push(join(ROOT, folder, 'package.json'), join(ROOT, folder, 'tsconfig.build.json'));
    for (const dir of ['src', 'proto']) {
      if (!existsSync(join(ROOT, folder, dir))) continue;
      for (const entry of readdirSync(join(ROOT, folder, dir), {
        recursive: true,
        withFileTypes: true,
      })) {
        if (entry.isFile()) files.push(join(entry.parentPath, entry.name));
      }
    }
  }
  for (const file of files.sort()) {
    hash.update(relative(ROOT, file)).update(readFileSync(file));
  }
  return hash.digest('hex').slice(0, 16);
}

/** Delete builds of other sources (and abandoned staging folders) older than an hour. */
function removeStaleBuilds(keep: string): void {
  for (const entry of readdirSync(CACHE)) {
    if (!entry.startsWith(PREFIX) || entry === keep) continue;
    const path = join(CACHE, entry);
    try {
      if (Date.now() - statSync(path).mtimeMs > STALE_AFTER_MS) {
        rmSync(path, { recursive: true, force: true });
      }
    } catch {
      // Removed meanwhile by another run.
    }
  }
}

/** What a run of the built CLI printed, and how it ended. */
export interface CliRun {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Run the CLI of `build` with `args` from the repository's root; reject if it has not finished
 * after `timeoutMs` (it is then sent SIGINT, so a demo stops its clients and deletes its keys).
 */
export function runBuiltCli(
  build: PrivateBuild,
  args: readonly string[],
  timeoutMs: number,
): Promise<CliRun> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(process.execPath, [build.cli, ...args], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => {
      child.kill('SIGINT');
      reject(new Error(`${args.join(' ')} did not finish in ${timeoutMs} ms\n${stderr}`));
    }, timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolvePromise({ code, stdout, stderr });
    });
  });
}
