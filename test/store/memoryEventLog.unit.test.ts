import { describe, expect, test } from 'vitest';
import { memoryEventLog } from '../../src/store/memoryEventLog.ts';
import { eventLogContract, message, newConversationId } from './eventLogContract.ts';

eventLogContract('MemoryEventLog', async () => memoryEventLog());

describe('MemoryEventLog', () => {
  test('a msgId is forgotten once the duplicate window has passed, like the stream’s', async () => {
    let now = 0;
    const log = memoryEventLog({ now: () => now, duplicateWindowMs: 1000 });
    const c = newConversationId();
    const first = await log.append(message(c, 0), { expectedLastSeq: 0, msgId: 'client-1' });
    now = 999;
    expect(await log.append(message(c, 0), { expectedLastSeq: 0, msgId: 'client-1' })).toEqual({
      seq: first.seq,
      duplicate: true,
    });
    now = 1000;
    const later = await log.append(message(c, 1), { expectedLastSeq: first.seq, msgId: 'client-1' });
    expect(later).toEqual({ seq: first.seq + 1, duplicate: false });
  });
});
