/**
 * The package compiled from `src/` into a private folder, for tests that run it in child
 * processes. Not `dist/`: a developer may rebuild that (`rm -rf dist`) while tests run, and a
 * stale `dist/` would test old code. The folder is under `node_modules/.cache/`, so the compiled
 * files resolve the engine clients. It has the package's layout: `package.json` (the module type,
 * and the version the CLI prints) next to `dist/`, with the files tsc does not emit (Lua
 * scripts) copied into `dist/`.
 *
 * One build serves every test file of a run: the folder is named after a hash of `src/`,
 * `package.json` and `tsconfig.build.json`, so the first file that needs it compiles (about 15 s)
 * and the others reuse it while the sources are unchanged.
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
  writeFileSync,
} from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

/** The repository's root folder. */
export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** A compiled copy of `src/`. */
export interface PrivateBuild {
  /** The folder holding the compiled `index.js`, `fencing/`, `cli/`, … (the copy's `dist/`). */
  readonly dir: string;
  /** Kept for callers; the shared build stays for the next test file (see the module comment). */
  remove(): void;
}

const CACHE = join(ROOT, 'node_modules', '.cache');
const PREFIX = 'fencelock-build-';
/** Builds of older sources are deleted once they are this old, ms. */
const STALE_AFTER_MS = 60 * 60 * 1000;

/** Compile `src/` (tsconfig.build.json), or reuse the build of the same sources. */
export async function privateBuild(_tag: string): Promise<PrivateBuild> {
  mkdirSync(CACHE, { recursive: true });
  const name = `${PREFIX}${sourceHash()}`;
  const root = join(CACHE, name);
  const built = { dir: join(root, 'dist'), remove: () => undefined };
  if (existsSync(join(root, '.complete'))) return built;

  const staging = join(CACHE, `${PREFIX}staging-${randomBytes(4).toString('hex')}`);
  const dir = join(staging, 'dist');
  mkdirSync(staging, { recursive: true });
  cpSync(join(ROOT, 'package.json'), join(staging, 'package.json'));
  try {
    await promisify(execFile)(
      process.execPath,
      [
        join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'),
        '-p',
        join(ROOT, 'tsconfig.build.json'),
        '--outDir',
        dir,
      ],
      { cwd: ROOT, timeout: 180_000 },
    );
  } catch (error) {
    // tsc still emits when someone's edit elsewhere in src/ has a type error.
    try {
      statSync(join(dir, 'index.js'));
    } catch {
      rmSync(staging, { recursive: true, force: true });
      throw error;
    }
  }
  copyAssets(join(ROOT, 'src'), dir);
  writeFileSync(join(staging, '.complete'), new Date().toISOString());
  try {
    renameSync(staging, root);
  } catch {
    // Another test file finished the same build first: use it.
    rmSync(staging, { recursive: true, force: true });
  }
  removeStaleBuilds(name);
  return built;
}

/** A hash of everything the build reads. */
function sourceHash(): string {
  const hash = createHash('sha256');
  const files = readdirSync(join(ROOT, 'src'), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name))
    .sort();
  for (const file of [...files, join(ROOT, 'package.json'), join(ROOT, 'tsconfig.build.json')]) {
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

/** Copy every non-TypeScript file under `from` to the same place under `to`. */
function copyAssets(from: string, to: string): void {
  for (const entry of readdirSync(from, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile() || entry.name.endsWith('.ts')) continue;
    const source = join(entry.parentPath, entry.name);
    cpSync(source, join(to, relative(from, source)));
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
    const child = spawn(process.execPath, [join(build.dir, 'cli', 'main.js'), ...args], {
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
