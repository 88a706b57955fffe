// Rules both EventLog implementations share, so the twin cannot drift.
import type { ReadOptions } from './eventLog.ts';

/** How long a msgId is remembered for deduplication (the stream's `duplicate_window`). */
export const DUPLICATE_WINDOW_MS = 2 * 60 * 1000;

/**
 * The deduplication key of an append. JetStream dedupes per stream, not per
 * subject, so a bare client id reused in another conversation would be taken
 * for a duplicate and silently dropped: the key carries the conversation.
 */
export function scopedMsgId(conversationId: string, msgId: string): string {
  return `${conversationId}:${msgId}`;
}

export interface ReadRange {
  afterSeq: number;
  /** Infinity when the caller gave no limit. */
  limit: number;
  /** Infinity when the caller gave no bound. */
  maxBytes: number;
}

export function readRange(options: ReadOptions = {}): ReadRange {
  const afterSeq = options.afterSeq ?? 0;
  const limit = options.limit ?? Number.POSITIVE_INFINITY;
  if (!Number.isSafeInteger(afterSeq) || afterSeq < 0) {
    throw new RangeError(`afterSeq must be a non-negative integer, got ${afterSeq}`);
  }
  if (limit !== Number.POSITIVE_INFINITY && (!Number.isSafeInteger(limit) || limit < 1)) {
    throw new RangeError(`limit must be a positive integer, got ${limit}`);
  }
  const maxBytes = options.maxBytes ?? Number.POSITIVE_INFINITY;
  if (maxBytes !== Number.POSITIVE_INFINITY && (!Number.isSafeInteger(maxBytes) || maxBytes < 1)) {
    throw new RangeError(`maxBytes must be a positive integer, got ${maxBytes}`);
  }
  return { afterSeq, limit, maxBytes };
}
