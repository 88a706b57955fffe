/**
 * A check of one parsed server frame. Its result has the shape of zod's
 * `safeParse`, so a caller that has zod can pass `(value) => ServerFrame.safeParse(value)`
 * (protocol/) for the strict check; the client never imports zod itself.
 */
export type FrameCheck = (value: unknown) => FrameCheckResult;

export type FrameCheckResult = { success: true } | { success: false; error: { message: string } };

const VALID: FrameCheckResult = { success: true };

const problem = (message: string): FrameCheckResult => ({ success: false, error: { message } });

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const isSeq = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;

const SYNC_STRINGS = ['conversation_id', 'state'];
const STATUS_STRINGS = ['level', 'id', 'message'];
const ERROR_STRINGS = ['code', 'message'];

/** The field of `frame` that is not a string, if any. */
function notString(frame: Record<string, unknown>, fields: readonly string[]): string | undefined {
  for (const field of fields) if (typeof frame[field] !== 'string') return field;
  return undefined;
}

/**
 * The default check: light and structural, with no allocation for a valid
 * frame. A frame is an object with a known `type` and the fields the client
 * and its callers read, of the right kind: `sync` a conversation id, an
 * integer `through_seq` and a state; `event` an integer `seq` and an `event`
 * object with a string `type`; `delta` its item, attempt, index and text;
 * `status` and `error` their strings. What is
 * inside an event is not looked at (the strict check does that).
 */
export const lightFrameCheck: FrameCheck = (value) => {
  if (!isObject(value)) return problem('a frame is a JSON object');
  switch (value.type) {
    case 'event': {
      if (!isSeq(value.seq)) return problem('event: seq is not a non-negative integer');
      const event = value.event;
      return isObject(event) && typeof event.type === 'string' ? VALID : problem('event: event is not an event');
    }
    case 'sync': {
      if (!isSeq(value.through_seq)) return problem('sync: through_seq is not a non-negative integer');
      const field = notString(value, SYNC_STRINGS);
      return field === undefined ? VALID : problem(`sync: ${field} is not a string`);
    }
    case 'status': {
      const field = notString(value, STATUS_STRINGS);
      return field === undefined ? VALID : problem(`status: ${field} is not a string`);
    }
    case 'error': {
      const field = notString(value, ERROR_STRINGS);
      return field === undefined ? VALID : problem(`error: ${field} is not a string`);
    }
    case 'delta': {
      if (typeof value.item_id !== 'string') return problem('delta: item_id is not a string');
      if (!isSeq(value.attempt) || value.attempt < 1) return problem('delta: attempt is not a positive integer');
      if (!isSeq(value.index)) return problem('delta: index is not a non-negative integer');
      return typeof value.text === 'string' ? VALID : problem('delta: text is not a string');
    }
    case 'pong':
      return VALID;
    default:
      return problem(`unknown frame type ${JSON.stringify(value.type)}`);
  }
};
