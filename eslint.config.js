// Lint for the whole repository: typescript-eslint with type information, and the
// import boundaries of the architecture (docs: ../shared/STYLE.md, "Layout").
import { builtinModules } from 'node:module';
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

/** What pure code (statecharts, wire schemas) must not import: it runs in browsers too. */
const IMPURE = [
  { group: ['node:*'], message: 'machines/ and protocol/ run in browsers too: no Node built-ins.' },
  { group: ['ws'], message: 'Only src/server/ speaks WebSocket.' },
  { group: ['@nats-io/*'], message: 'Only src/store/ talks to NATS.' },
];
/**
 * What machines/ must not import besides: protocol values (the zod schemas would follow into
 * every browser bundle of the machines: the page, `tether replay`) and zod itself.
 */
const MACHINES_ONLY = [
  {
    regex: '(^|/)protocol(/|$)',
    allowTypeImports: true,
    message: 'machines/ imports protocol types only (`import type`): a value would bring zod into the browser.',
  },
  { group: ['zod', 'zod/*'], message: 'machines/ never imports zod: it runs in browsers, and the edge parses.' },
];
/** Node built-ins named without the `node:` prefix. */
const BARE_BUILTINS = builtinModules.filter((name) => !name.startsWith('_'));

export default tseslint.config(
  {
    ignores: [
      'dist/',
      'dist-bench/',
      'dist.tmp-*/',
      'dist.old-*/',
      'node_modules/',
      'coverage/',
      '.tether/',
      '.scratch/',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      // The in-memory twins implement async ports without awaiting anything: `async` keeps a throw a rejection.
      '@typescript-eslint/require-await': 'off',
      'no-restricted-imports': [
        'error',
        { patterns: [{ group: ['@nats-io/*'], message: 'Only src/store/ talks to NATS (ports at the core).' }] },
      ],
    },
  },
  {
    files: ['machines/**', 'protocol/**'],
    rules: {
      'no-restricted-imports': ['error', { paths: BARE_BUILTINS.map((name) => ({ name })), patterns: IMPURE }],
      'no-restricted-globals': [
        'error',
        { name: 'Buffer', message: 'Node only: use Uint8Array and TextEncoder.' },
        { name: 'process', message: 'Node only: take what you need as an argument.' },
        { name: '__dirname', message: 'Node only.' },
        { name: 'require', message: 'Node only.' },
      ],
    },
  },
  {
    // After the block above: this rule's options replace its options there.
    files: ['machines/**'],
    rules: {
      'no-restricted-imports': [
        'error',
        { paths: BARE_BUILTINS.map((name) => ({ name })), patterns: [...IMPURE, ...MACHINES_ONLY] },
      ],
      // `import { type X }` keeps the module as a side-effect import under verbatimModuleSyntax: `import type` drops it.
      '@typescript-eslint/no-import-type-side-effects': 'error',
    },
  },
  {
    // The protocol client runs in the page too: no Node, no socket library (the caller gives the WebSocket
    // class), no NATS, and no zod at run time (it would reach the page's bundle): protocol/ for its types only.
    files: ['src/client/**'],
    rules: {
      // `import { type X } from` keeps the import, and so the module, at run time: `import type` only.
      '@typescript-eslint/no-import-type-side-effects': 'error',
      'no-restricted-imports': 'off',
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: [
            ...BARE_BUILTINS.map((name) => ({ name })),
            { name: 'zod', allowTypeImports: true, message: 'src/client/ reaches the page: no zod at run time.' },
          ],
          patterns: [
            { group: ['node:*'], message: 'src/client/ runs in browsers too: no Node built-ins.' },
            { group: ['ws'], message: 'The caller gives the WebSocket class (the browser’s, or ws’s in Node).' },
            { group: ['@nats-io/*'], message: 'Only src/store/ talks to NATS.' },
            { group: ['zod/*'], allowTypeImports: true, message: 'src/client/ reaches the page: no zod at run time.' },
            {
              regex: '(^|/)protocol(/|$)',
              allowTypeImports: true,
              message: 'protocol/ holds zod schemas: src/client/ imports its types only (`import type`).',
            },
          ],
        },
      ],
      'no-restricted-globals': [
        'error',
        { name: 'Buffer', message: 'Node only: use Uint8Array and TextDecoder.' },
        { name: 'process', message: 'Node only: take what you need as an argument.' },
        { name: '__dirname', message: 'Node only.' },
        { name: 'require', message: 'Node only.' },
      ],
    },
  },
  {
    // Tests poke at parsed JSON (frames, REST answers, LLM request bodies); the schemas are checked in src/.
    files: ['test/**'],
    rules: {
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
    },
  },
  {
    // The store's adapters, and tests and benches that stand up raw NATS baselines.
    files: ['src/store/**', 'test/**', 'bench/**'],
    rules: { 'no-restricted-imports': 'off' },
  },
  {
    files: ['**/*.js'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { globals: globals.node },
  },
);
