export type {
  Runtime,
  RuntimeProvider,
  RuntimeOptions,
  RunOptions,
  RuntimeExit,
  CommandResult,
  RepositoryToClone,
  CloneRun,
  ClonedRepository,
} from './runtime.ts';
export { RuntimeDeadError } from './errors.ts';
export { LocalRuntime, type LocalRuntimeConfig } from './localRuntime.ts';
export { localRuntimeProvider, type LocalRuntimeProviderOptions } from './localRuntimeProvider.ts';
export { probeBwrap, type SandboxMode, type SandboxOptions } from './sandbox.ts';
export { CloneError } from './gitClone.ts';
