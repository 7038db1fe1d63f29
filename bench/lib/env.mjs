// The bench's surroundings: where the engines listen (the ports of scripts/services.sh), starting
// the engines that are down, a fresh build of the package, the Curator worker (Java), and a
// description of the machine for the report.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sleep } from './stats.mjs';

/** The repository's root folder. */
export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** Where the bench keeps what it builds (the Curator worker's classes). */
export const CACHE = join(ROOT, 'node_modules', '.cache', 'fencelock-bench');

const HOST = '127.0.0.1';

/**
 * Engine addresses, from the same environment variables and defaults as scripts/services.sh and
 * test/helpers/engines.ts (an empty variable means the default, like `${VAR:-default}`).
 */
export function endpoints(env = process.env) {
  const num = (name, fallback) => Number(env[name] || fallback);
  const redlockBase = num('FENCELOCK_REDLOCK_PORT_BASE', 6400);
  const etcdBase = num('FENCELOCK_ETCD_CLIENT_PORT_BASE', 23790);
  const zkBase = num('FENCELOCK_ZK_CLIENT_PORT_BASE', 21811);
  return {
    redis: { host: HOST, port: num('FENCELOCK_REDIS_PORT', 6390) },
    redlock: [1, 2, 3, 4, 5].map((n) => ({ host: HOST, port: redlockBase + n })),
    etcd: [1, 2, 3].map((n) => `${HOST}:${etcdBase + n}`),
    zookeeper: [0, 1, 2].map((n) => `${HOST}:${zkBase + n}`),
    postgres: { host: HOST, port: num('FENCELOCK_PG_PORT', 25432), user: 'fencelock' },
  };
}

/** The scripts/services.sh engine each store needs (SQLite needs none). */
export const ENGINE_OF = {
  redis: 'redis',
  redlock: 'redlock',
  etcd: 'etcd',
  zookeeper: 'zookeeper',
  postgres: 'postgres',
  sqlite: undefined,
};

function services(...args) {
  return spawnSync('bash', [join(ROOT, 'scripts', 'services.sh'), ...args], {
    cwd: ROOT,
    encoding: 'utf8',
  });
}

/** `up`, `down` or `partly` (some parts up: another session's fault test may be at work). */
function engineState(engine) {
  const lines = services('status', engine).stdout.split('\n').filter(Boolean);
  const up = lines.filter((line) => /: up on /.test(line)).length;
  if (lines.length > 0 && up === lines.length) return 'up';
  return up === 0 && lines.every((line) => /: down$/.test(line)) ? 'down' : 'partly';
}

/**
 * Make sure the engines of `stores` answer: reuse running ones; start one with
 * `scripts/services.sh up <engine>` only when all of it is down. An engine that is partly up
 * (a member stopped or paused, likely by someone's fault test) is left alone: the bench waits
 * up to 30 s for it to recover and otherwise skips its stores.
 * @returns a map from engine to the reason it is unavailable (empty when all are fine).
 */
export async function ensureEngines(stores, log) {
  const unavailable = new Map();
  const engines = [...new Set(stores.map((s) => ENGINE_OF[s]).filter(Boolean))];
  for (const engine of engines) {
    let state = engineState(engine);
    if (state === 'down') {
      log(`starting ${engine}: scripts/services.sh up ${engine}`);
      const started = services('up', engine);
      if (started.status !== 0) {
        unavailable.set(
          engine,
          `scripts/services.sh up ${engine} failed: ${started.stderr.trim()}`,
        );
        continue;
      }
      state = engineState(engine);
    }
    for (let waited = 0; state === 'partly' && waited < 30; waited += 2) {
      if (waited === 0) log(`${engine} is partly up (a fault test?); waiting for it`);
      await sleep(2000);
      state = engineState(engine);
    }
    if (state !== 'up')
      unavailable.set(engine, `${engine} is ${state} (scripts/services.sh status)`);
  }
  return unavailable;
}

function newestMtimeMs(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile())
      newest = Math.max(newest, statSync(join(entry.parentPath, entry.name)).mtimeMs);
  }
  return newest;
}

/**
 * The compiled library the bench imports: `FENCELOCK_BENCH_DIST` if set (a private build, so a
 * bench never races a `rm -rf dist` elsewhere), else `packages/fencelock/dist/`, rebuilt with
 * `npm run build` when it is missing or older than a file under `packages/fencelock/src/`.
 */
export function ensureBuild(log) {
  const own = process.env.FENCELOCK_BENCH_DIST;
  if (own) return own;
  const library = join(ROOT, 'packages', 'fencelock');
  const dist = join(library, 'dist');
  const index = join(dist, 'index.js');
  const stale = !existsSync(index) || statSync(index).mtimeMs < newestMtimeMs(join(library, 'src'));
  if (stale) {
    log('packages/fencelock/dist/ is missing or older than its src/: npm run build');
    const built = spawnSync('npm', ['run', 'build', '--silent'], { cwd: ROOT, stdio: 'inherit' });
    if (built.status !== 0) throw new Error('npm run build failed');
  }
  return dist;
}

const JAVA_DIR = '/usr/share/java';
/** Jars the Curator worker compiles and runs against (Debian's libcurator-recipes-java & deps). */
const CURATOR_JARS = [
  'curator-recipes.jar',
  'curator-framework.jar',
  'curator-client.jar',
  'zookeeper.jar',
  'zookeeper-jute.jar',
  'guava.jar',
  'slf4j-api.jar',
  'slf4j-nop.jar',
  'jackson-databind.jar',
  'jackson-core.jar',
  'jackson-annotations.jar',
];

function haveCommand(name) {
  return spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).status === 0;
}

function missingJars() {
  return CURATOR_JARS.filter((jar) => !existsSync(join(JAVA_DIR, jar)));
}

/**
 * Build the Curator worker (bench/curator/CuratorBench.java) with `javac` against Debian's
 * Curator jars. If the jars or the JDK are missing and we are root with apt-get, install them
 * through `scripts/install-engines.sh --bench` (an optional bench dependency: the tests never
 * need it).
 * @returns `{ java: [command, ...args] }` to start a worker, or `{ skipped: reason }`.
 */
export function ensureCurator(log) {
  const canInstall = process.getuid?.() === 0 && haveCommand('apt-get');
  if (missingJars().length > 0 || !haveCommand('javac') || !haveCommand('java')) {
    if (!canInstall) {
      return {
        skipped: `needs java, javac and Debian's libcurator-recipes-java (missing: ${[
          ...missingJars(),
          ...['java', 'javac'].filter((c) => !haveCommand(c)),
        ].join(', ')}); run scripts/install-engines.sh --bench as root`,
      };
    }
    log('installing the Curator worker dependencies: scripts/install-engines.sh --bench');
    const installed = spawnSync('bash', [join(ROOT, 'scripts', 'install-engines.sh'), '--bench'], {
      cwd: ROOT,
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    if (installed.status !== 0) return { skipped: 'scripts/install-engines.sh --bench failed' };
    if (missingJars().length > 0 || !haveCommand('javac')) {
      return { skipped: `still missing after install: ${missingJars().join(', ') || 'javac'}` };
    }
  }
  const source = join(ROOT, 'bench', 'curator', 'CuratorBench.java');
  const hash = createHash('sha256').update(readFileSync(source)).digest('hex').slice(0, 16);
  const classes = join(CACHE, `curator-${hash}`);
  const classpath = CURATOR_JARS.map((jar) => join(JAVA_DIR, jar)).join(':');
  if (!existsSync(join(classes, 'CuratorBench.class'))) {
    mkdirSync(classes, { recursive: true });
    const compiled = spawnSync('javac', ['-cp', classpath, '-d', classes, source], {
      encoding: 'utf8',
    });
    if (compiled.status !== 0) return { skipped: `javac failed: ${compiled.stderr.trim()}` };
  }
  return {
    java: [
      'java',
      // A short-lived client: small heap, no class-data work; the JIT still compiles fully.
      '-Xms64m',
      '-Xmx512m',
      '-XX:+UseSerialGC',
      '-cp',
      `${classes}:${classpath}`,
      'CuratorBench',
    ],
    version: curatorVersion(),
  };
}

function curatorVersion() {
  try {
    return execFileSync('dpkg-query', ['-W', `-f=\${Version}`, 'libcurator-recipes-java'], {
      encoding: 'utf8',
    }).trim();
  } catch {
    return 'unknown';
  }
}

function tryRun(command, args) {
  try {
    return execFileSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
      .split('\n')[0]
      .trim();
  } catch {
    return undefined;
  }
}

/** The machine, its load and the versions that matter, for the report. */
export function machine() {
  return {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    loadAverage: loadavg().map((l) => Math.round(l * 100) / 100),
    node: process.version,
    redis: tryRun('redis-server', ['--version']),
    etcd: tryRun('etcd', ['--version']),
    java:
      tryRun('java', ['-version']) ??
      spawnSync('java', ['-version'], { encoding: 'utf8' }).stderr?.split('\n')[0],
    postgres: tryRun('bash', [
      '-c',
      'ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1 | xargs -I{} {}/postgres --version',
    ]),
  };
}

/** Version of an installed npm package (from its package.json). */
export function packageVersion(name) {
  try {
    return JSON.parse(readFileSync(join(ROOT, 'node_modules', name, 'package.json'), 'utf8'))
      .version;
  } catch {
    return 'missing';
  }
}

/** Write a file, creating its folder. */
export function writeFile(path, text) {
  mkdirSync(join(path, '..'), { recursive: true });
  writeFileSync(path, text);
}
