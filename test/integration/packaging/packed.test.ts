/**
 * The packages as users get them: `npm pack` of the library and of the command line, installed
 * into fresh `npm init -y` projects (no workspace around them).
 * - The library's tarball holds no tools code (CLI, sidecar, torture, demos, bench) and no
 *   `@internal` declarations; installed alone, peer dependencies omitted, its production tree
 *   is the package itself; a Redis-only project type-checks `fencelock/fencing/redis` with no
 *   `pg` installed.
 * - The command line's tarball, installed locally and globally, answers `fencelock --help`,
 *   runs a command under a lock on Redis, and says that the demos run from a clone.
 * - In this clone, `npm ci` linked the `fencelock` command (`npx fencelock` works).
 * Dependencies come from npm's cache when it has them (`--prefer-offline`), else the registry.
 */
import { execFile } from 'node:child_process';
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REDIS_URL } from '../../helpers/engines.js';
import { ROOT } from '../../helpers/private-build.js';

const exec = promisify(execFile);
const scratch = mkdtempSync(join(tmpdir(), 'fencelock-packed-'));
const NPM_FLAGS = ['--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'];
let libraryTarball: string;
let cliTarball: string;

/** Run `npm` in `cwd`; resolves to its stdout. */
async function npm(cwd: string, args: readonly string[]): Promise<string> {
  const { stdout } = await exec('npm', [...args], { cwd, timeout: 240_000, maxBuffer: 1 << 24 });
  return stdout;
}

/** A new `npm init -y` project in the scratch folder. */
async function freshProject(name: string): Promise<string> {
  const dir = join(scratch, name);
  mkdirSync(dir);
  await npm(dir, ['init', '-y']);
  return dir;
}

/** Link a package the repository has installed into `project` (no registry involved). */
function linkFromRoot(project: string, name: string): void {
  mkdirSync(join(project, 'node_modules'), { recursive: true });
  symlinkSync(join(ROOT, 'node_modules', name), join(project, 'node_modules', name));
}

/** Files of a tarball, as npm lists them. */
async function tarballFiles(tarball: string): Promise<string[]> {
  const { stdout } = await exec('tar', ['-tzf', tarball]);
  return stdout.split('\n').filter((line) => line !== '');
}

beforeAll(async () => {
  const packed = JSON.parse(
    await npm(ROOT, [
      'pack',
      '--json',
      '-w',
      'packages/fencelock',
      '-w',
      'packages/cli',
      '--pack-destination',
      scratch,
    ]),
  ) as { filename: string; name: string }[];
  const file = (name: string) => join(scratch, packed.find((p) => p.name === name)!.filename);
  libraryTarball = file('fencelock');
  cliTarball = file('@fencelock/cli');
}, 300_000);

afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe('the fencelock tarball', () => {
  it('holds the library only: no CLI, sidecar, torture, demo or bench code', async () => {
    const files = await tarballFiles(libraryTarball);
    expect(files).toContain('package/dist/index.js');
    expect(files).toContain('package/dist/fencing/redis.d.ts');
    expect(files).toContain('package/dist/backends/redis/scripts/queued-acquire.lua');
    expect(files).toContain('package/dist/backends/redlock/scripts/grant-on-node.lua');
    expect(files).toContain('package/README.md');
    expect(files).toContain('package/LICENSE');
    const tools = files.filter((f) => /\/(cli|server|torture|demos?|bench)\//.test(f));
    expect(tools).toEqual([]);
  });

  it('installs alone with no other package in its production tree', async () => {
    const project = await freshProject('library-alone');
    await npm(project, ['install', '--omit=peer', ...NPM_FLAGS, libraryTarball]);
    const installed = readdirSync(join(project, 'node_modules')).filter((n) => !n.startsWith('.'));
    expect(installed).toEqual(['fencelock']);
    // npm ls also lists the optional peers it did not install (no version): only installed count.
    const tree = JSON.parse(await npm(project, ['ls', '--all', '--omit=dev', '--json']));
    const installedIn = (deps: Record<string, { version?: string }> = {}) =>
      Object.keys(deps).filter((name) => deps[name]?.version !== undefined);
    expect(installedIn(tree.dependencies)).toEqual(['fencelock']);
    expect(installedIn(tree.dependencies.fencelock.dependencies)).toEqual([]);
  }, 300_000);

  it('type-checks a Redis-only project that imports the Redis guard (no pg installed)', async () => {
    const project = await freshProject('redis-only');
    await npm(project, ['install', '--omit=peer', ...NPM_FLAGS, libraryTarball]);
    linkFromRoot(project, 'ioredis');
    linkFromRoot(project, '@types');
    writeFileSync(
      join(project, 'main.ts'),
      [
        "import { Redis } from 'ioredis';",
        "import { createLocker } from 'fencelock';",
        "import { RedisFence } from 'fencelock/fencing/redis';",
        "const fence = new RedisFence(new Redis('redis://127.0.0.1:6379'));",
        "const locker = createLocker('redis://127.0.0.1:6379');",
        'export async function main(): Promise<void> {',
        "  await locker.withLock('k', (lease) => fence.write('k', lease.fencingToken, 'v'));",
        '}',
        '',
      ].join('\n'),
    );
    writeFileSync(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'es2022',
          module: 'nodenext',
          strict: true,
          noEmit: true,
          skipLibCheck: false,
          types: ['node'],
        },
        files: ['main.ts'],
      }),
    );
    const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const result = await exec(process.execPath, [tsc, '-p', project], { cwd: project }).then(
      () => '',
      (error: { stdout: string }) => error.stdout,
    );
    expect(result).toBe('');
  }, 300_000);
});

describe('the @fencelock/cli tarball', () => {
  let project: string;
  const bin = () => join(project, 'node_modules', '.bin', 'fencelock');

  beforeAll(async () => {
    project = await freshProject('cli');
    await npm(project, [
      'install',
      '--omit=optional',
      '--omit=peer',
      ...NPM_FLAGS,
      libraryTarball,
      cliTarball,
    ]);
    linkFromRoot(project, 'ioredis');
  }, 300_000);

  it('holds the command line and the sidecar, not the tools', async () => {
    const files = await tarballFiles(cliTarball);
    expect(files).toContain('package/dist/cli/main.js');
    expect(files).toContain('package/dist/server/index.js');
    expect(files.filter((f) => /\/(torture|demos?|bench)\//.test(f))).toEqual([]);
  });

  it('answers fencelock --help with run, inspect and serve', async () => {
    const { stdout } = await exec(bin(), ['--help'], { cwd: project });
    expect(stdout).toMatch(/^Usage: fencelock /);
    for (const command of ['run', 'inspect', 'serve', 'demo']) {
      expect(stdout).toMatch(new RegExp(`^ {2}${command}\\b`, 'm'));
    }
  });

  it('runs a command under a lock on Redis, passing the fencing token', async () => {
    const { stdout } = await exec(
      bin(),
      [
        'run',
        '--store',
        REDIS_URL,
        `packed-cli-${process.pid}`,
        '--',
        process.execPath,
        '-e',
        'console.log("token=" + process.env.FENCELOCK_TOKEN)',
      ],
      { cwd: project },
    );
    expect(stdout).toMatch(/^token=[1-9]\d*$/m);
  });

  it('says the demos run from a clone of the repository (exit code 2)', async () => {
    const result = await exec(bin(), ['demo', 'flash-sale'], { cwd: project }).then(
      () => ({ code: 0, stderr: '' }),
      (error: { code: number; stderr: string }) => error,
    );
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('the demos run from a clone of the repository');
  });

  it('works from a global install (npm install -g): run on Redis with its own ioredis', async () => {
    // As from the registry, where `fencelock` is a dependency of the command line and installs
    // inside it: the command line's tarball again, its `fencelock` dependency pointing at the
    // library's tarball. (Both tarballs side by side on the command line would make the library
    // a global package of its own, which cannot see the command line's engine clients.)
    const unpacked = join(scratch, 'cli-for-global');
    mkdirSync(unpacked);
    await exec('tar', ['-xzf', cliTarball, '-C', unpacked]);
    const manifestPath = join(unpacked, 'package', 'package.json');
    const manifest = JSON.parse(readFileSync(manifestPath, 'utf8'));
    manifest.dependencies.fencelock = `file:${libraryTarball}`;
    writeFileSync(manifestPath, JSON.stringify(manifest));
    // A folder would be installed as a link to it; a tarball installs as the registry's would.
    const [repacked] = JSON.parse(
      await npm(scratch, ['pack', '--json', '--ignore-scripts', join(unpacked, 'package')]),
    ) as { filename: string }[];
    const prefix = join(scratch, 'global');
    // A global install takes the optional engine clients too; --ignore-scripts spares the
    // native builds (better-sqlite3, several minutes where no prebuilt binary can be fetched).
    await npm(scratch, [
      'install',
      '-g',
      '--prefix',
      prefix,
      '--ignore-scripts',
      ...NPM_FLAGS,
      join(scratch, repacked!.filename),
    ]);
    const fencelock = join(prefix, 'bin', 'fencelock');
    const { stdout: version } = await exec(fencelock, ['--version']);
    expect(version.trim()).toBe(manifest.version);
    const { stdout } = await exec(fencelock, [
      'run',
      '--store',
      REDIS_URL,
      `packed-global-${process.pid}`,
      '--',
      process.execPath,
      '-e',
      'console.log("token=" + process.env.FENCELOCK_TOKEN)',
    ]);
    expect(stdout).toMatch(/^token=[1-9]\d*$/m);
  }, 300_000);
});

describe('this clone', () => {
  it('has the fencelock command linked by npm ci (npx fencelock)', async () => {
    const { stdout } = await exec(join(ROOT, 'node_modules', '.bin', 'fencelock'), ['--help']);
    expect(stdout).toMatch(/^Usage: fencelock /);
  });
});
