import { z } from 'zod';

/** Subject-safe: no dots, spaces or wildcards, so it can sit inside a NATS subject token. */
export const ConversationId = z
  .string()
  .regex(/^[A-Za-z0-9_-]{1,64}$/, 'conversation ids are 1-64 characters of A-Z, a-z, 0-9, _ and -');
export type ConversationId = z.infer<typeof ConversationId>;

export const ClientId = z.string().min(1).max(128);

/** JetStream stream sequence: the client's cursor. */
export const Seq = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
