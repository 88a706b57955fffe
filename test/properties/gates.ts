/** What waits at a gate: an agent step, or a command in the runtime. */
export type GateKind = 'agent' | 'command';

export interface Gate {
  kind: GateKind;
  /** Accepted user actions when the gate was made, to tell whether the user acted during the step. */
  actsAtCreation: number;
  open(): void;
  fail(): void;
}

/**
 * Holds agent steps (and, unless commands are instant, commands) until the
 * script releases them, so actions can land while the agent works and the
 * session is quiet whenever every remaining piece of work waits at a gate.
 * A gate whose step was aborted (its session left memory) leaves the queue.
 */
export class Gates {
  readonly #queue: Gate[] = [];

  wait(kind: GateKind, actsAtCreation: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason as Error);
      const onAbort = () => settle(() => reject(signal?.reason as Error));
      const settle = (then: () => void) => {
        signal?.removeEventListener('abort', onAbort);
        const at = this.#queue.indexOf(gate);
        if (at >= 0) this.#queue.splice(at, 1);
        then();
      };
      const gate: Gate = {
        kind,
        actsAtCreation,
        open: () => settle(resolve),
        fail: () => settle(() => reject(new Error('the model is unavailable'))),
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.#queue.push(gate);
    });
  }

  get waiting(): readonly Gate[] {
    return this.#queue;
  }

  /** Drops every waiting gate without settling it: the work behind it hangs, as in a dead process. */
  forget(): void {
    this.#queue.length = 0;
  }

  /** Opens the oldest gate (of that kind), or makes its work fail; false when none waits. */
  release(kind?: GateKind, outcome: 'succeed' | 'fail' = 'succeed'): boolean {
    const gate = this.#queue.find((g) => kind === undefined || g.kind === kind);
    if (outcome === 'fail') gate?.fail();
    else gate?.open();
    return gate !== undefined;
  }
}
