import type { DirectMsgRequest, JetStreamManager, StoredMsg } from '@nats-io/jetstream';
import { firstAnswer } from './firstAnswer.ts';
import { SILENT } from './kvRetry.ts';
import { isTimeout } from './natsErrors.ts';

/**
 * A direct get of `stream`, asked again beside the first when no answer came
 * after half a second, then a second (SILENT): any of the stream's servers
 * answers one, and a request that went to a server as it died (a kill, a
 * restart) is answered by another instead of waited out for 5 s.
 */
export function directGet(jsm: JetStreamManager, stream: string, query: DirectMsgRequest): Promise<StoredMsg | null> {
  return firstAnswer(() => jsm.direct.getMessage(stream, query), SILENT, { lost: isTimeout, drop: () => undefined });
}
