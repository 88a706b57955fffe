import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { StoredEvent } from '../../protocol/index.ts';
import { storedEventJsonSchema, storedEventJsonSchemaText } from '../../protocol/jsonSchema.ts';

describe('stored event JSON Schema', () => {
  it('in docs/ is exactly what the zod schema generates (run `npm run docs` after changing it)', () => {
    const committed = readFileSync(new URL('../../docs/stored-event.schema.json', import.meta.url), 'utf8');
    expect(committed).toBe(storedEventJsonSchemaText());
  });

  it('names every event type the zod schema accepts', () => {
    const schemaTypes = (storedEventJsonSchema().oneOf as Array<{ properties: { type: { const: string } } }>).map(
      (variant) => variant.properties.type.const,
    );
    expect(schemaTypes.sort()).toEqual([...StoredEvent.options.map((o) => o.shape.type.value)].sort());
  });
});

describe('stored event zod schema', () => {
  const valid = {
    v: 1,
    id: 0,
    conversation_id: 'abc',
    ts: '2026-01-01T00:00:00.000Z',
    source: 'user',
    type: 'message',
    data: { content: 'hi' },
  };

  it('accepts a well-formed event', () => {
    expect(StoredEvent.safeParse(valid).success).toBe(true);
  });

  it('refuses a conversation id that cannot sit in a NATS subject', () => {
    expect(StoredEvent.safeParse({ ...valid, conversation_id: 'a.b' }).success).toBe(false);
    expect(StoredEvent.safeParse({ ...valid, conversation_id: 'a*' }).success).toBe(false);
  });

  it('refuses a timestamp that is not ISO 8601 UTC', () => {
    expect(StoredEvent.safeParse({ ...valid, ts: '2026-01-01 00:00' }).success).toBe(false);
  });

  it('refuses data that does not match its type', () => {
    expect(StoredEvent.safeParse({ ...valid, data: { text: 'hi' } }).success).toBe(false);
  });

  it('takes a rate-limit retry bound in conversation_created: optional, a whole number, 0 or more', () => {
    const created = (data: Record<string, unknown>) => ({
      ...valid,
      type: 'conversation_created',
      data: { user: 'u', confirmation_mode: false, max_iterations: 10, secret_names: [], replay: false, ...data },
    });
    expect(StoredEvent.safeParse(created({})).success).toBe(true);
    expect(StoredEvent.safeParse(created({ max_rate_limit_retries: 0 })).success).toBe(true);
    expect(StoredEvent.safeParse(created({ max_rate_limit_retries: 3 })).success).toBe(true);
    expect(StoredEvent.safeParse(created({ max_rate_limit_retries: -1 })).success).toBe(false);
    expect(StoredEvent.safeParse(created({ max_rate_limit_retries: 1.5 })).success).toBe(false);
    expect(StoredEvent.safeParse(created({ max_rate_limit_retries: '3' })).success).toBe(false);
  });
});
