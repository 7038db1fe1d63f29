import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import { sourceAliases } from './scripts/source-aliases.mjs';

const root = fileURLToPath(new URL('.', import.meta.url));

// The workspace's packages import each other by name; tests run their sources, not dist/.
const alias = Object.entries(sourceAliases()).map(([specifier, source]) => ({
  find: new RegExp(`^${specifier.replace(/[/.@-]/g, '\\$&')}$`),
  replacement: `${root}${source}`,
}));

export default defineConfig({
  resolve: { alias },
  test: {
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
        },
      },
      {
        extends: true,
        test: {
          name: 'integration',
          include: [
            'test/contract/**/*.test.ts',
            'test/integration/**/*.test.ts',
            'test/examples/**/*.test.ts',
          ],
          testTimeout: 60_000,
          hookTimeout: 60_000,
          // Engines are shared; files run one at a time so timing-sensitive cases stay honest.
          fileParallelism: false,
        },
      },
    ],
  },
});
