import { memorySnapshotStore } from '../../src/store/index.ts';
import { snapshotStoreContract } from './snapshotStoreContract.ts';

snapshotStoreContract('MemorySnapshotStore', async () => memorySnapshotStore());
