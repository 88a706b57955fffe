import type { RepositoryProgress } from '../../machines/index.ts';
import type { StatusFrame } from '../../protocol/index.ts';
import { errorFields } from '../logger.ts';
import { CloneError, type ClonedRepository } from '../runtime/index.ts';
import { readInstructions } from '../workspace/instructions.ts';
import { STATUS } from './effectResults.ts';
import type { EffectDeps, EffectHost } from './effectRunner.ts';

/** What a runtime's start gives the repository step: the session, its dependencies, and the start's abort signal. */
export interface RepositoryStart {
  host: EffectHost;
  deps: Pick<EffectDeps, 'runtimes' | 'secrets' | 'cloneTimeoutMs'>;
  signal: AbortSignal;
}

/**
 * The conversation's repository, once, while its runtime sets up: cloned
 * into the workspace by this process (outside the sandbox;
 * `repository_cloned`), then its instruction files read
 * (`instructions_loaded`). A failed clone is stored as its own fact (the
 * agent in error, the runtime stopped, nothing cloned again until a
 * `reconnect_runtime`): false, and the start goes no further. True at once
 * without a repository, or once it is ready.
 */
export async function prepareRepository(
  start: RepositoryStart,
  workspace: string,
  status: (frame: Omit<StatusFrame, 'type'>) => void,
): Promise<boolean> {
  const repository = start.host.repository();
  if (!repository || repository.status === 'ready') return true;
  if (repository.status !== 'cloned') {
    const { url, branch } = repository;
    status({ ...STATUS.cloning, message: `Cloning ${url}${branch ? ` (branch ${branch})` : ''}...` });
    let cloned: ClonedRepository;
    try {
      cloned = await clone(start, repository);
    } catch (err) {
      if (start.signal.aborted) return false;
      status(STATUS.cloneFailed);
      const message = err instanceof CloneError ? err.reason : String(errorFields(err).error);
      await start.host.decide({ type: 'clone_failed', message });
      return false;
    }
    await start.host.decide({ type: 'repository_cloned', ...cloned });
  }
  await start.host.decide({ type: 'instructions_loaded', files: await readInstructions(workspace) });
  return true;
}

/** The clone, by the runtimes' provider, with the token from the conversation's secret it names. */
function clone({ host, deps, signal }: RepositoryStart, repository: RepositoryProgress): Promise<ClonedRepository> {
  const { runtimes, secrets, cloneTimeoutMs = 120_000 } = deps;
  const { url, branch, tokenSecret } = repository;
  if (!runtimes.cloneRepository) throw new CloneError('CLONE_FAILED', 'these runtimes have no files to clone into');
  const token = tokenSecret === undefined ? undefined : secrets[tokenSecret];
  if (tokenSecret !== undefined && token === undefined) {
    throw new CloneError('CLONE_FAILED', `the secret ${tokenSecret} is not available on this node`);
  }
  const what = { url, ...(branch !== undefined && { branch }), ...(token !== undefined && { token }) };
  return runtimes.cloneRepository(host.conversationId, what, { timeoutMs: cloneTimeoutMs, signal });
}
