// `npm run lint` runs dependency-cruiser with these rules: no import cycles anywhere, the core
// knows no engine, and the library imports nothing from the command line, the sidecar or the
// tools (packages/cli, tools/).
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'An import cycle: modules that import each other (directly or through others).',
      from: {},
      to: { circular: true },
    },
    {
      name: 'core-knows-no-engine',
      severity: 'error',
      comment: 'packages/fencelock/src/core is engine-free: no backend module, no engine client.',
      from: { path: '^packages/fencelock/src/core/' },
      to: {
        path: [
          '^packages/fencelock/src/backends/',
          '(^|/)node_modules/(ioredis|redis|@redis/[^/]+|etcd3|zookeeper|pg|better-sqlite3)/',
        ],
      },
    },
    {
      name: 'library-stands-alone',
      severity: 'error',
      comment: 'The library does not import the CLI, the sidecar or the tools.',
      from: { path: '^packages/fencelock/' },
      to: { path: '^(packages/cli|tools)/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '(^|/)(dist|node_modules)/' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
      extensions: ['.ts', '.js', '.mjs', '.cjs', '.d.ts'],
    },
  },
};
