import { setTimeout as sleep } from 'node:timers/promises';
import type { KV } from '@nats-io/kv';
import type { ZodType } from 'zod';
import { firstAnswer } from './firstAnswer.ts';
import { isWrongLastSequence } from './kvRemove.ts';
import { SILENT } from './kvRetry.ts';
import { isTimeout } from './natsErrors.ts';

/** Compare-and-set rounds before a change gives up (writers of one key contend only at once). */
const CAS_ROUNDS = 100;

/**
 * Read-modify-write of small shared values in a KV bucket by compare-and-set:
 * changes of one key made by this process run one after another (they contend
 * only with other processes'), and a lost round waits a little and reads again.
 */
export class KvCas {
  readonly #kv: KV;
  readonly #queues = new Map<string, Promise<unknown>>();

  constructor(kv: KV) {
    this.#kv = kv;
  }

  async read<T>(key: string, schema: ZodType<T>): Promise<{ value: T; revision: number } | undefined> {
    const found = await this.#kv.get(key);
    if (found === null || found.operation !== 'PUT') return undefined;
    const parsed = schema.safeParse(safeJson(found.value));
    if (!parsed.success) throw new Error(`value ${key} is invalid`, { cause: parsed.error });
    return { value: parsed.data, revision: found.revision };
  }

  /**
   * Compare-and-set `change` of the key's value (undefined: none yet), one
   * change of the key at a time in this process; the value written and its
   * revision, or null when `change` said no write (null).
   *
   * `idempotent`: `change` applied to its own result writes nothing (it adds
   * to a set, or takes from it). Then a write with no answer for half a second
   * (one that reached the bucket's stream as its leader moved is answered by
   * no one) is sent again beside the first, expecting the same revision: at
   * most one of them is applied, and should the other's conflict come first,
   * the next round reads the value again and finds nothing left to write.
   * Without it, a lost answer waits out the bucket's timeout: writing the
   * change twice could apply it twice (a counter).
   */
  change<T>(
    key: string,
    schema: ZodType<T>,
    change: (value: T | undefined) => T | null,
    options: { idempotent?: boolean } = {},
  ): Promise<{ value: T; revision: number } | null> {
    const cas = () => this.#cas(key, schema, change, options.idempotent === true);
    const turn = (this.#queues.get(key) ?? Promise.resolve()).then(cas, cas);
    this.#queues.set(key, turn);
    void turn.then(
      () => this.#queues.get(key) === turn && this.#queues.delete(key),
      () => this.#queues.get(key) === turn && this.#queues.delete(key),
    );
    return turn;
  }

  async #cas<T>(
    key: string,
    schema: ZodType<T>,
    change: (value: T | undefined) => T | null,
    idempotent: boolean,
  ): Promise<{ value: T; revision: number } | null> {
    for (let round = 0; round < CAS_ROUNDS; round++) {
      if (round > 0) await sleep(Math.random() * Math.min(50, round * 2));
      const read = await this.read(key, schema);
      const value = change(read?.value);
      if (value === null) return null;
      try {
        const json = JSON.stringify(value);
        const write = () =>
          read === undefined ? this.#kv.create(key, json) : this.#kv.update(key, json, read.revision);
        const revision = idempotent
          ? await firstAnswer(write, SILENT, { lost: isTimeout, drop: () => undefined })
          : await write();
        return { value, revision };
      } catch (err) {
        if (!isWrongLastSequence(err)) throw err;
      }
    }
    throw new Error(`key ${key}: ${CAS_ROUNDS} writers in a row changed it first`);
  }
}

function safeJson(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch {
    return undefined;
  }
}
