import { afterEach, describe, expect, it } from 'vitest';
import { SecretsNeedKeyError, type NodeHost } from '../../src/host/index.ts';
import { memorySecretStore } from '../../src/store/index.ts';
import { memoryHost } from '../support/memoryHost.ts';

const managers: NodeHost[] = [];
afterEach(async () => {
  await Promise.all(managers.splice(0).map((m) => m.shutdown()));
});

const body = (secrets: Record<string, string>) => ({ confirmation_mode: false, max_iterations: 10, secrets });

describe('secrets on a node of a cluster', () => {
  it('without a key, a conversation with secrets is refused with SECRETS_NEED_KEY and one without is created', async () => {
    const manager = memoryHost({ secrets: 'refuse' });
    managers.push(manager);
    await expect(manager.commands.create('local', body({ TOKEN: 'x' }))).rejects.toThrow(SecretsNeedKeyError);
    await expect(manager.commands.create('local', body({ TOKEN: 'x' }))).rejects.toMatchObject({
      code: 'SECRETS_NEED_KEY',
    });
    await expect(manager.commands.create('local', body({}))).resolves.toHaveProperty('conversation_id');
  });

  it('with a sealed store, they are kept there at creation and gone with the conversation', async () => {
    const sealed = memorySecretStore();
    const manager = memoryHost({ secrets: sealed, newId: () => 'conv1' });
    managers.push(manager);
    await manager.commands.create('local', body({ TOKEN: 'x' }));
    expect(await sealed.get('conv1')).toEqual({ TOKEN: 'x' });
    await manager.commands.delete('conv1', 'local');
    expect(await sealed.get('conv1')).toBeUndefined();
  });
});
