import type { ZodType } from 'zod';
import { ConversationEntry } from './conversationStore.ts';

// Values of the conversation bucket, parsed with their schema: anything on the NATS account can write it.

/** A bucket value that is not what its key holds. */
export class InvalidValueError extends Error {
  override name = 'InvalidValueError';
}

export function parseOrNull(key: string, bytes: Uint8Array): ConversationEntry | null {
  try {
    return parse(key, bytes, ConversationEntry);
  } catch {
    return null;
  }
}

export function parse<T>(key: string, bytes: Uint8Array, schema: ZodType<T>): T {
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder().decode(bytes));
  } catch (err) {
    throw new InvalidValueError(`conversation bucket value ${key} is not JSON`, { cause: err });
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new InvalidValueError(`conversation bucket value ${key} is invalid: ${parsed.error.message}`, {
      cause: parsed.error,
    });
  }
  return parsed.data;
}
