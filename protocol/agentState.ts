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

/**
 * A runtime's life: `starting` (being created), `connecting` (waiting for it to
 * answer), `setting_up` (workspace set-up), `connected` (ready for commands),
 * `disconnected` (died or failed), `reconnecting` (being replaced), `stopped`
 * (stopped on purpose, for example when the session leaves memory).
 */
export const RuntimeStatus = z.enum([
  'starting',
  'connecting',
  'setting_up',
  'connected',
  'disconnected',
  'reconnecting',
  'stopped',
]);
export type RuntimeStatus = z.infer<typeof RuntimeStatus>;
