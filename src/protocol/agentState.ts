import { z } from 'zod';

/** Agent states as OpenHands users know them. */
export const AgentState = z.enum([
  'loading',
  'running',
  'awaiting_user_input',
  'paused',
  'stopped',
  'finished',
  'rejected',
  'error',
  'awaiting_user_confirmation',
  'user_confirmed',
  'user_rejected',
  'rate_limited',
]);
export type AgentState = z.infer<typeof AgentState>;

export const RuntimeStatus = z.enum(['starting', 'connected', 'disconnected', 'reconnecting', 'stopped']);
export type RuntimeStatus = z.infer<typeof RuntimeStatus>;
