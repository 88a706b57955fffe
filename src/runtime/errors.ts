import { TetherError } from '../errors.ts';

/** The runtime is not running (never started, stopped, or died). */
export class RuntimeDeadError extends TetherError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('RUNTIME_DEAD', message, options);
  }
}
