/**
 * The packages as users get them: `npm pack` of the library and of the command line, installed
 * into fresh `npm init -y` projects (no workspace around them).
 * - The library's tarball holds no tools code (CLI, sidecar, torture, demos, bench) and no
 *   `@internal` declarations; installed alone, peer dependencies omitted, its production tree
 *   is the package itself; a Redis-only project type-checks `fencelock/fencing/redis` with no
 *   `pg` installed.
 * - The command line's tarball, installed locally and globally, answers `fencelock --help`,
 *   runs a command under a lock on Redis, and says that the demos run from a clone.
 * - A newcomer's project (the README's Quickstart): `npm init -y`, `npm pkg set type=module`, the
 *   library's tarball with `better-sqlite3@12` (its install script approved, as npm 11 asks),
 *   TypeScript 5.9 and `@types/node@20`, `tsc --init`; the README's `quickstart` block copied
 *   verbatim into `index.ts` compiles with that tsconfig unchanged and prints what the README
 *   shows. In the same project, `require('fencelock')` works from a `.cjs` file, and a CommonJS
 *   project with `moduleResolution: node10` finds the types of `fencelock` and its subpaths.
 * - In this clone, `npm ci` linked the `fencelock` command (`npx fencelock` works).
 * Dependencies come from npm's cache when it has them (`--prefer-offline`), else the registry.
 */
import { type ChildProcessWithoutNullStreams, execFile, spawn } from 'node:child_process';
import {
  existsSync,
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
import { quickstartOf } from '../../docs/blocks.js';
import { REDIS_URL } from '../../helpers/engines.js';
import { ROOT } from '../../helpers/private-build.js';
import { grpcClients, unary } from '../server/grpc-support.js';

const exec = promisify(execFile);
const scratch = mkdtempSync(join(tmpdir(), 'fencelock-packed-'));
const NPM_FLAGS = ['--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'];
let libraryTarball: string;
let cliTarball: string;

/** Run `npm` in `cwd` (with `env` added to the environment); resolves to its stdout. */
async function npm(
  cwd: string,
  args: readonly string[],
  env: Record<string, string> = {},
): Promise<string> {
  const { stdout } = await exec('npm', [...args], {
    cwd,
    // Compiling a native addon where no prebuilt binary is found takes minutes on a busy machine.
    timeout: 900_000,
    maxBuffer: 1 << 24,
    env: { ...process.env, ...env },
  });
  return stdout;
}

/**
 * A folder holding better-sqlite3's prebuilt binary for this Node.js, as its install script
 * (prebuild-install) downloads it for a newcomer, named as on the download host. This machine
 * cannot reach that host, so the file is made from the repository's own build of the addon, and
 * handed to the install through prebuild-install's "local prebuilds" setting. When the version
 * npm picks differs from the repository's, no file matches and npm compiles the addon (minutes).
 */
async function localPrebuilds(): Promise<Record<string, string>> {
  const addon = join(ROOT, 'node_modules', 'better-sqlite3');
  const { version } = JSON.parse(readFileSync(join(addon, 'package.json'), 'utf8'));
  const dir = join(scratch, 'prebuilds');
  mkdirSync(dir, { recursive: true });
  const { modules } = process.versions;
  const file = `better-sqlite3-v${version}-node-v${modules}-${process.platform}-${process.arch}.tar.gz`;
  await exec('tar', ['-czf', join(dir, file), '-C', addon, 'build/Release/better_sqlite3.node']);
  return { npm_config_better_sqlite3_local_prebuilds: dir };
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

/**
 * The first group of `pattern` in what a `fencelock serve` process writes to stderr, once it
 * appears; rejects with that stderr if the process exits first.
 */
function announced(child: ChildProcessWithoutNullStreams, pattern: RegExp): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
      const m = pattern.exec(stderr);
      if (m) resolve(m[1]!);
    });
    child.once('exit', (code) => reject(new Error(`serve exited with ${code}\n${stderr}`)));
  });
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
    expect(files).toContain('package/proto/fencelock/v1/locks.proto');
    expect(files).toContain('package/proto/dapr/runtime/v1/dapr_lock.proto');
    expect(files.filter((f) => /\/(torture|demos?|bench)\//.test(f))).toEqual([]);
    for (const asset of ['index.html', 'app.js', 'app.css']) {
      expect(files).toContain(`package/dist/server/dashboard/ui/${asset}`);
    }
  });

  it('serves the dashboard from the installed package: its page, script and uPlot', async () => {
    const child = spawn(bin(), ['serve', '--store', REDIS_URL, '--port', '0'], {
      cwd: project,
      env: { ...process.env, FENCELOCK_SERVER_TOKEN: '' },
    });
    try {
      const dashboard = await announced(child, /dashboard at (\S+)/);
      const expected: [string, string, string][] = [
        ['', 'text/html', '<title>fencelock dashboard</title>'],
        ['/assets/app.js', 'javascript', 'new EventSource(`/ui/events'],
        ['/vendor/uPlot.iife.min.js', 'javascript', 'uPlot'],
        ['/vendor/uPlot.min.css', 'text/css', '.uplot'],
      ];
      for (const [path, type, text] of expected) {
        const answer = await fetch(`${dashboard}${path}`);
        expect(answer.status, path).toBe(200);
        expect(answer.headers.get('content-type'), path).toContain(type);
        expect(await answer.text(), path).toContain(text);
      }
    } finally {
      child.kill('SIGTERM');
    }
  });

  it('serves gRPC from the installed package (its shipped .proto files)', async () => {
    const child = spawn(bin(), ['serve', '--store', REDIS_URL, '--port', '0', '--grpc-port', '0'], {
      cwd: project,
      env: { ...process.env, FENCELOCK_SERVER_TOKEN: '' },
    });
    try {
      const address = await announced(child, / and gRPC on (\S+)/);
      const clients = grpcClients(address);
      try {
        const { response } = await unary(clients.dapr, 'GetMetadata', {});
        expect(response.registeredComponents).toEqual([
          { name: 'lockstore', type: 'lock.fencelock', version: 'v1', capabilities: [] },
        ]);
      } finally {
        clients.close();
      }
    } finally {
      child.kill('SIGTERM');
    }
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

describe("a newcomer's project (the README Quickstart)", () => {
  let project: string;
  /** Run `npx <args>` in the project (its own TypeScript); resolves to stdout and stderr. */
  const npx = (args: readonly string[], cwd = project) =>
    exec('npx', ['--no-install', ...args], { cwd, timeout: 120_000 });
  /** Run `node <file>` in `cwd`; resolves to its stdout. */
  const node = async (file: string, cwd = project) =>
    (await exec(process.execPath, [file], { cwd, timeout: 30_000 })).stdout;

  beforeAll(async () => {
    // The README's steps, in its order; the library from its tarball instead of the registry.
    project = await freshProject('newcomer');
    await npm(project, ['pkg', 'set', 'type=module']);
    // npm 11 runs better-sqlite3's install script with a warning (it fetches the prebuilt
    // binary, see localPrebuilds); the approval records the script in `allowScripts`.
    await npm(
      project,
      ['install', ...NPM_FLAGS, libraryTarball, 'better-sqlite3@12'],
      await localPrebuilds(),
    );
    await npm(project, ['install-scripts', 'approve', 'better-sqlite3']);
    // The README: "when an addon was not built, npm rebuild better-sqlite3".
    const addon = join(project, 'node_modules/better-sqlite3/build/Release/better_sqlite3.node');
    if (!existsSync(addon)) await npm(project, ['rebuild', 'better-sqlite3']);
    await npm(project, ['install', '--save-dev', ...NPM_FLAGS, 'typescript@5.9', '@types/node@20']);
    await npx(['tsc', '--init']);
  }, 900_000);

  it('gets the tsconfig the README assumes from tsc --init (TypeScript 5.9)', async () => {
    const ts = await import(join(project, 'node_modules', 'typescript', 'lib', 'typescript.js'));
    const read = ts.default.readConfigFile(join(project, 'tsconfig.json'), ts.default.sys.readFile);
    expect(read.config.compilerOptions).toMatchObject({
      module: 'nodenext',
      target: 'esnext',
      types: [],
      strict: true,
      verbatimModuleSyntax: true,
      moduleDetection: 'force',
    });
    expect(read.config.compilerOptions.lib).toBeUndefined();
    const manifest = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8'));
    expect(manifest.type).toBe('module');
    // `better-sqlite3`, or `better-sqlite3@<version>` where npm pins the approval.
    const approved = Object.entries(manifest.allowScripts ?? {}).filter(
      ([name, allowed]) => name.replace(/@[^@]*$/, '') === 'better-sqlite3' && allowed === true,
    );
    expect(approved).toHaveLength(1);
  });

  it('compiles the Quickstart block verbatim and prints what the README shows', async () => {
    const quickstart = quickstartOf('README.md', readFileSync(join(ROOT, 'README.md'), 'utf8'));
    writeFileSync(join(project, 'index.ts'), quickstart.block.code);
    const tsc = await npx(['tsc']).catch((error: { stdout: string }) => ({ stdout: error.stdout }));
    expect(tsc.stdout).toBe('');
    expect((await node('index.js')).split('\n')).toEqual([...quickstart.output, '']);
  }, 120_000);

  it("loads fencelock with require() from a .cjs file (Node's require of ES modules)", async () => {
    writeFileSync(
      join(project, 'main.cjs'),
      [
        "const { createLocker } = require('fencelock');",
        "const locker = createLocker('sqlite:./cjs.db');",
        'locker',
        "  .withLock('cjs', (lease) => console.log('fencing token ' + lease.fencingToken))",
        '  .finally(() => locker.close());',
        '',
      ].join('\n'),
    );
    const { stdout, stderr } = await exec(process.execPath, ['main.cjs'], { cwd: project });
    expect(stdout).toBe('fencing token 1\n');
    expect(stderr).toBe('');
  });

  it('type-checks fencelock and its subpaths with moduleResolution node10, and runs the CommonJS output', async () => {
    const dir = join(project, 'node10');
    mkdirSync(dir);
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'commonjs' }));
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'commonjs',
          moduleResolution: 'node10',
          target: 'es2022',
          strict: true,
          types: ['node'],
          skipLibCheck: true,
        },
        files: ['main.ts'],
      }),
    );
    writeFileSync(
      join(dir, 'main.ts'),
      [
        "import { createLocker, type Lease } from 'fencelock';",
        "import type { RedisBackendOptions } from 'fencelock/redis';",
        "import type { RedisFence } from 'fencelock/fencing/redis';",
        "import type { PgFence } from 'fencelock/fencing/postgres';",
        "import type { collectPrometheusMetrics } from 'fencelock/metrics/prometheus';",
        '',
        'export type Used = [RedisBackendOptions, RedisFence, PgFence, typeof collectPrometheusMetrics];',
        "const locker = createLocker('sqlite:./node10.db');",
        "void locker.withLock('node10', (lease: Lease) => {",
        "  console.log('fencing token ' + lease.fencingToken);",
        '}).finally(() => locker.close());',
        '',
      ].join('\n'),
    );
    const tsc = await npx(['tsc', '-p', dir]).catch((error: { stdout: string }) => ({
      stdout: error.stdout,
    }));
    expect(tsc.stdout).toBe('');
    expect(readFileSync(join(dir, 'main.js'), 'utf8')).toContain('require("fencelock")');
    expect(await node('main.js', dir)).toBe('fencing token 1\n');
  }, 120_000);
});

describe('this clone', () => {
  it('has the fencelock command linked by npm ci (npx fencelock)', async () => {
    const { stdout } = await exec(join(ROOT, 'node_modules', '.bin', 'fencelock'), ['--help']);
    expect(stdout).toMatch(/^Usage: fencelock /);
  });
});
