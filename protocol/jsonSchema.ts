import { z } from 'zod';
import { StoredEvent } from './event.ts';

/** The JSON Schema of a stored event, as written to docs/stored-event.schema.json. */
export function storedEventJsonSchema(): Record<string, unknown> {
  return z.toJSONSchema(StoredEvent, { target: 'draft-2020-12', io: 'output' });
}

/** The exact text of docs/stored-event.schema.json. */
export function storedEventJsonSchemaText(): string {
  return `${JSON.stringify(storedEventJsonSchema(), null, 2)}\n`;
}
