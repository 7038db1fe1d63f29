import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
        },
      },
      {
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
