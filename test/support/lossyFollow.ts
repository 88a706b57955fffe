import type { LoggedEvent } from '../../protocol/index.ts';
import type { FollowHandlers } from '../../src/store/index.ts';
import { memoryEventLog } from '../../src/store/memoryEventLog.ts';
import { LogSubscriptions, type LogSubscriptionsOptions } from '../../src/store/logSubscriptions.ts';

/** Subscriptions on a memory log whose follow loses the events `drop` picks, as a follow that fell behind would. */
export function lossy(drop: (logged: LoggedEvent) => boolean, options: LogSubscriptionsOptions = {}) {
  const log = memoryEventLog();
  const dropped: LoggedEvent[] = [];
  let [follows, stops, reads] = [0, 0, 0];
  const subscriptions = new LogSubscriptions(
    {
      read: (id, readOptions) => {
        reads += 1;
        return log.read(id, readOptions);
      },
      last: (id) => log.last(id),
      follow: (handlers: FollowHandlers) => {
        follows += 1;
        const follower = log.follow({
          ...handlers,
          event: (conversationId, logged) => {
            if (drop(logged)) dropped.push(logged);
            else handlers.event(conversationId, logged);
          },
        });
        return {
          ready: follower.ready,
          stop: () => {
            stops += 1;
            return follower.stop();
          },
        };
      },
    },
    options,
  );
  return { log, subscriptions, dropped, follows: () => follows, stops: () => stops, reads: () => reads };
}
