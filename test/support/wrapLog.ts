import type { EventLog, FollowHandlers, LogFollower } from '../../src/store/index.ts';
import { LogSubscriptions } from '../../src/store/logSubscriptions.ts';

/** An event log that has the one follow subscriptions are built on (both stores do). */
export interface FollowableLog extends EventLog {
  follow(handlers: FollowHandlers): LogFollower;
}

export type LogChanges = Partial<EventLog> & { follow?: FollowableLog['follow'] };

/**
 * `inner` with some of its methods replaced. Its subscriptions are built as
 * the stores build theirs, on the wrapper's own `read` and `last` and on
 * `follow` (the inner log's unless replaced), so a replaced read or a lossy
 * follow reaches subscribers too.
 */
export function wrapLog(inner: FollowableLog, changes: LogChanges = {}): EventLog {
  const { follow = (handlers) => inner.follow(handlers), ...replaced } = changes;
  const log: EventLog = {
    append: (event, options) => inner.append(event, options),
    read: (id, options) => inner.read(id, options),
    lastSeq: (id) => inner.lastSeq(id),
    last: (id) => inner.last(id),
    purge: (id) => inner.purge(id),
    subscribe: (id, afterSeq, subscriber) => subscriptions.subscribe(id, afterSeq, subscriber),
    ...replaced,
  };
  const subscriptions = new LogSubscriptions({
    read: (id, options) => log.read(id, options),
    last: (id) => log.last(id),
    follow,
  });
  return log;
}
