export type { Runtime, RuntimeProvider, RuntimeOptions, RunOptions, RuntimeExit, CommandResult } from './runtime.ts';
export { RuntimeDeadError } from './errors.ts';
export {
  LocalRuntime,
  localRuntimeProvider,
  type LocalRuntimeConfig,
  type LocalRuntimeProviderOptions,
} from './localRuntime.ts';
