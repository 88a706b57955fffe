import type { ListPosition } from '../../protocol/index.ts';
import type { ClusterRouter } from '../cluster/clusterRouter.ts';
import type { Session } from '../conversation/session.ts';
import type { Logger } from '../logger.ts';
import type { ConversationEntry, ConversationStore, StatusChannel } from '../store/index.ts';
import type { LiveSessions } from './liveSessions.ts';
import { TOO_MANY_CONVERSATIONS } from './passivationPolicy.ts';

/** Pages of a user's index read to find the user's conversations running on other nodes. */
const CAP_SCAN_PAGES = 10;

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
 * user's conversations running on other nodes (their index entries say
 * running) count too, and the oldest of those leave through their owners
 * until the user is within the cap.
 */
export async function capAcrossCluster(session: Session, deps: ClusterCapDeps): Promise<void> {
  const user = session.user;
  if (user === undefined) return;
  const remote = await runningElsewhere(deps, user, session.conversationId);
  let here = 0;
  for (const s of deps.live.values())
    if (s !== session && !s.released && s.user === user && s.state === 'running') here += 1;
  let excess = here + remote.length + 1 - deps.maxRunningPerUser;
  remote.sort((a, b) => (a.running_since ?? 0) - (b.running_since ?? 0));
  for (const victim of remote) {
    if (excess <= 0) return;
    const id = victim.conversation_id;
    const node = await deps.router.ownerElsewhere(id);
    if (node === null) continue;
    excess -= 1;
    deps.logger.info('per-user cap: a conversation on another node leaves memory', { conversation_id: id, node });
    deps.status.publish(id, TOO_MANY_CONVERSATIONS);
    await deps.router.passivateOn(node, id, 'too_many_running');
  }
}

/** The user's conversations whose index entry says running, other than `except` and those live here. */
async function runningElsewhere(deps: ClusterCapDeps, user: string, except: string): Promise<ConversationEntry[]> {
  const found: ConversationEntry[] = [];
  let after: ListPosition | undefined;
  for (let pages = 0; pages < CAP_SCAN_PAGES; pages++) {
    const page = await deps.conversations.list(user, { limit: 100, ...(after && { after }) });
    for (const entry of page.items)
      if (entry.state === 'running' && entry.conversation_id !== except && !deps.live.get(entry.conversation_id))
        found.push(entry);
    const last = page.items.at(-1);
    if (!page.more || !last) break;
    after = { created_at: last.created_at, conversation_id: last.conversation_id };
  }
  return found;
}
