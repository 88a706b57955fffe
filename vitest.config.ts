import { configDefaults, defineConfig } from 'vitest/config';

const CLUSTER_TESTS = 'test/**/*.cluster.test.ts';
const BROWSER_TESTS = 'test/**/*.browser.test.ts';
const timeouts = { testTimeout: 30_000, hookTimeout: 30_000 };

export default defineConfig({
  test: {
    // One real nats-server for the whole run; every int test makes its own stream. The
    // root's globalSetup runs once and what it provides reaches every project, which
    // is why the projects below do not extend this config (each would start its own).
    globalSetup: ['test/support/globalSetup.ts'],
    projects: [
      {
        test: {
          name: 'tests',
          include: ['test/**/*.test.ts'],
          exclude: [...configDefaults.exclude, CLUSTER_TESTS, BROWSER_TESTS],
          ...timeouts,
        },
      },
      {
        // Each cluster test starts three nats-servers: one file at a time, after all
        // the others, so that they do not compete with other tests for the cores.
        test: {
          name: 'cluster',
          include: [CLUSTER_TESTS],
          fileParallelism: false,
          sequence: { groupOrder: 1 },
          ...timeouts,
        },
      },
      {
        // Each page test drives a Chromium against real server processes: one file at a time, last.
        test: {
          name: 'browser',
          include: [BROWSER_TESTS],
          fileParallelism: false,
          sequence: { groupOrder: 2 },
          ...timeouts,
        },
      },
    ],
  },
});
