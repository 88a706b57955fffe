// What a client must have seen of a streamed agent reply (docs/protocol.md, "Deltas").
import { expect } from 'vitest';
import type { ServerFrame, StoredEvent } from '../../protocol/index.ts';

type DeltaFrame = Extract<ServerFrame, { type: 'delta' }>;
type AgentAnswer = Extract<StoredEvent, { type: 'message' | 'command' | 'finish' }>;

/** The stored agent answer of `itemId` among the frames, with its position, or undefined. */
export function storedItem(
  frames: readonly ServerFrame[],
  itemId: string,
): { at: number; event: AgentAnswer } | undefined {
  const at = frames.findIndex(
    (f) =>
      f.type === 'event' &&
      f.event.source === 'agent' &&
      (f.event.type === 'message' || f.event.type === 'command' || f.event.type === 'finish') &&
      f.event.data.item_id === itemId,
  );
  if (at < 0) return undefined;
  return { at, event: (frames[at] as Extract<ServerFrame, { type: 'event' }>).event as AgentAnswer };
}

/**
 * One connection's frames of one item: the deltas of the stored answer's attempt,
 * each index once and in order from 0, all before the stored answer, none of
 * the item after it, and joined equal to its text. Returns the answer.
 */
export function expectStreamedOnce(frames: readonly ServerFrame[], itemId: string): AgentAnswer {
  const stored = storedItem(frames, itemId);
  expect(stored, `the stored answer of item ${itemId}`).toBeDefined();
  const { at, event } = stored!;
  const attempt = event.data.attempt;
  const before = frames.slice(0, at).filter((f): f is DeltaFrame => f.type === 'delta' && f.item_id === itemId);
  const final = before.filter((d) => d.attempt === attempt);
  expect(final.map((d) => d.index)).toEqual(final.map((_, i) => i));
  expect(final).toHaveLength(event.data.deltas!);
  // Attempts only grow on one connection: an older one's deltas all come before the newer one's.
  expect(before.map((d) => d.attempt)).toEqual([...before.map((d) => d.attempt)].sort((x, y) => x - y));
  const after = frames.slice(at + 1).filter((f) => f.type === 'delta' && f.item_id === itemId);
  expect(after, 'deltas of the item after its stored answer').toEqual([]);
  const text = event.type === 'command' ? event.data.thought : event.data.content;
  expect(final.map((d) => d.text).join('')).toBe(text ?? '');
  return event;
}

export function deltasOf(frames: readonly ServerFrame[]): DeltaFrame[] {
  return frames.filter((f): f is DeltaFrame => f.type === 'delta');
}
