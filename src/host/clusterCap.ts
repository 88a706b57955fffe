import type { ClusterRouter } from '../cluster/clusterRouter.ts';
import type { Session } from '../conversation/session.ts';
import type { Logger } from '../logger.ts';
import type { ConversationStore, RunningEntry, StatusChannel } from '../store/index.ts';
import type { LiveSessions } from './liveSessions.ts';
import { TOO_MANY_CONVERSATIONS } from './passivationPolicy.ts';

export interface ClusterCapDeps {
  live: LiveSessions;
  conversations: ConversationStore;
  router: ClusterRouter;
  status: StatusChannel;
  logger: Logger;
  maxRunningPerUser: number;
}

/**
 * The per-user running cap across the cluster, when a session here just
 * started running. The local policy already sent this node's excess out; the
 * user's conversations running on other nodes (the user's running set: the one
 * read, bounded by what runs, not by the user's history) count too, and the oldest of those leave through their owners
 * until the user is within the cap.
 */
export async function capAcrossCluster(session: Session, deps: ClusterCapDeps): Promise<void> {
  const user = session.user;
  if (user === undefined) return;
  const remote = await runningElsewhere(deps, user, session.conversationId);
  let here = 0;
  for (const s of deps.live.values())
    if (s !== session && !s.released && s.user === user && s.state === 'running') here += 1;
  remote.sort((a, b) => a.running_since - b.running_since);
  // Only those a live node runs count (a key left by a node that died, recovery not done yet, does not).
  const owned: Array<{ id: string; node: string }> = [];
  for (const { conversation_id: id } of remote) {
    const node = await deps.router.ownerElsewhere(id);
    if (node !== null) owned.push({ id, node });
  }
  let excess = here + owned.length + 1 - deps.maxRunningPerUser;
  for (const { id, node } of owned) {
    if (excess <= 0) return;
    excess -= 1;
    deps.logger.info('per-user cap: a conversation on another node leaves memory', { conversation_id: id, node });
    deps.status.publish(id, TOO_MANY_CONVERSATIONS);
    await deps.router.passivateOn(node, id, 'too_many_running');
  }
}

/** The user's conversations whose entry says running in memory, other than `except` and those live here. */
async function runningElsewhere(deps: ClusterCapDeps, user: string, except: string): Promise<RunningEntry[]> {
  const running = await deps.conversations.running(user);
  return running.filter(({ conversation_id: id }) => id !== except && !deps.live.get(id));
}
