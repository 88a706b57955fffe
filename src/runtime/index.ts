export type { Runtime, RuntimeProvider, RuntimeOptions, RunOptions, RuntimeExit, CommandResult } from './runtime.ts';
export { RuntimeDeadError } from './errors.ts';
export { LocalRuntime, type LocalRuntimeConfig } from './localRuntime.ts';
export { localRuntimeProvider, type LocalRuntimeProviderOptions } from './localRuntimeProvider.ts';
